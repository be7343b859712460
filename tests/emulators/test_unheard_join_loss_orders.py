"""A gang's node lost while the functions have not heard whether it trained
with its gang since the gang was placed or last regrouped, through the real
handlers with the local cloud's VMs (``node_replacement.lost``):

* lost after a regroup, before it rejoined, reported by the log sink alone
  (its VM died before its agent could report): the gang regroups against
  the save it regrouped from once the lost node's notice is over with no
  stop of the gang heard, rather than wait for a save that never comes;
* a worker lost before its own TRAINING report came, after node 0's epoch:
  the gang stepped, so the regroup waits for node 0's stop and save, even
  when the replacement boots first.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import Heartbeat, ReaperTick, SpotPreempted
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.liveness import NOTICE_MARGIN_S, PREEMPTION_NOTICE_S
from spotline.shared.domain.states import JobSubstatus
from tests.conftest import SPEC
from tests.emulators.test_gang_late_epochs import epoch
from tests.emulators.test_gang_replacement import boot, job_of
from tests.emulators.test_gang_resize import N0, N1, N2, R1, gang_stop, regroup, told
from tests.emulators.test_gangs import node
from tests.emulators.test_recovery import log_sink_entry
from tests.emulators.test_second_loss_orders import regrouped_once

pytestmark = pytest.mark.emulators
S = JobSubstatus
R2 = "sl-job1-a1-n2-g2"


def notice_passed(project: str) -> None:
    """The lost node's notice and its margin pass: the loss recorded that
    long ago (the functions read the wall clock)."""

    def earlier(job: JobDoc) -> JobDoc:
        assert job.replacing is not None
        since = job.replacing.since - timedelta(seconds=PREEMPTION_NOTICE_S + NOTICE_MARGIN_S)
        return job.model_copy(
            update={"replacing": job.replacing.model_copy(update={"since": since})}
        )

    FirestoreStore(project).update_job("job1", earlier)


def test_a_node_lost_before_it_rejoined_heard_only_from_the_log_sink_regroups_at_its_notices_end(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    regrouped_once(call, host)
    # Taken before its agent read the regroup; its VM died before the agent
    # could report: only the log sink tells, with no generation.
    call("on_spot_preempted", "spot_preempted", log_sink_entry(host, N2), message_id="ls2")
    boot(call, R2, mid="b2")
    job = job_of(project)
    assert (job.substatus, job.nodes) == (S.REPLACING_NODE, [N0, R1, R2])
    assert told(host, N0) == regroup(1, [N0, R1, N2])  # node 0's stop may still come
    notice_passed(project)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    # Before: the gang waited for node 0's save, and was relaunched whole at its bound.
    for name in (N0, R1, R2):
        assert told(host, name) == regroup(2, [N0, R1, R2])
    job = job_of(project)
    assert (job.substatus, job.attempt, job.preemptions) == (S.TRAINING, 1, 2)
    assert job.attempts[0].checkpoint_step == 40


def test_a_worker_lost_before_its_training_report_waits_for_node_zeros_stop(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", {**SPEC, "nodes": 3}, message_id="s1")
    for name in (N0, N2):  # node 1's TRAINING report is still on its way
        beat = node(Heartbeat, name, phase="TRAINING", step=0)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")
    assert epoch(call, N0, 1, "e1", checkpoint_uri="gs://b/ckpt-10") == 200
    # Node 1's notice: its agent reports it (a worker saves nothing).
    notice = node(SpotPreempted, N1, generation=0)
    call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    boot(call, R1, mid="b1")
    # Before: the gang regrouped here, against epoch 1's save, while node 0
    # was saving the step the survivors stopped at.
    assert told(host, N0) is None and job_of(project).substatus == S.REPLACING_NODE
    gang_stop(call, N2, None, generation=0, mid="g2")
    gang_stop(call, N0, 14, generation=0, mid="g0")
    for name in (N0, R1, N2):
        assert told(host, name) == regroup(1, [N0, R1, N2])
    job = job_of(project)
    assert (job.substatus, job.attempt, job.preemptions) == (S.TRAINING, 1, 1)
    assert job.attempts[0].checkpoint_step == 14
