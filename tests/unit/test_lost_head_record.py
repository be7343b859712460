"""An elastic gang's smaller head lost, heard only from the log sink (found
by the elastic replay, ``tests/slow/test_replay_elastic.py``).

The order: a 3-node gang (``min_nodes`` 2) loses node 1; node 0 saves at
step 40, and nodes 0 and 2 train on at 2. Node 0, their head, reports an
epoch at step 60 with its checkpoint, then is lost; only the log sink
reports it (no step). Its save counts once its notice is over
(``NodeReplacement.lost_head``), both replacements boot, and the gang grows
back whole from the newest checkpoint in storage: step 60. The attempt's
record still says 40, the step the gang shrank from; the record is meant
to keep the step the gang resumes from (``lifecycle.saved_state``).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from spotline.shared.contract.events import EpochDone
from spotline.shared.domain import late_epochs, node_replacement, pending_nodes
from spotline.shared.domain.liveness import NOTICE_MARGIN_S, PREEMPTION_NOTICE_S
from spotline.shared.domain.states import JobSubstatus
from tests.unit.test_gang_resize import stop
from tests.unit.test_node_replacement import N0, N1, N2, at, lose, regroup, training_gang

S = JobSubstatus


@pytest.mark.xfail(
    strict=True,
    reason="open: a lost head's save counted at its notice's end records no step "
    "(the record keeps the step the gang shrank from)",
)
def test_the_record_names_the_lost_heads_last_checkpoint_the_gang_grows_back_from() -> None:
    job = lose(training_gang(3, min_nodes=2, epochs=10), N1)
    job = regroup(stop(job, N0, 40, generation=0), at(12))
    assert job.replacing is not None and job.replacing.shrunk == [N0, N2]
    epoch = EpochDone(
        job_id=job.job_id,
        attempt=1,
        instance=N0,
        sent_at=at(20),
        epoch=3,
        epochs=10,
        step=60,
        checkpoint_uri="gs://b/ckpt-60",
    )
    job = late_epochs.epoch_done(job, epoch, at(20))
    job = lose(job, N0, seconds=30)  # the log sink's report: no step
    assert job.substatus == S.REPLACING_NODE and job.attempt == 1
    for name in pending_nodes.replacements(job):
        job = node_replacement.booted(job, name, 1)
    over = at(30) + timedelta(seconds=PREEMPTION_NOTICE_S + NOTICE_MARGIN_S)
    planned = node_replacement.plan(job, over)
    assert planned is not None and not planned.shrink
    job = node_replacement.regrouped(job, planned, over)
    assert (job.substatus, job.attempt, job.resizes) == (S.TRAINING, 1, 2)
    assert job.attempts[0].checkpoint_step == 60
