"""An elastic gang training at its smaller size loses its replacement
before it joined, through the real handlers with the local cloud's VMs:
another one is inserted and the smaller gang trains on, then grows back
with it (``spotline.shared.domain.gang_resize``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import Heartbeat, JobFinished, ReaperTick
from spotline.shared.domain import node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.vms import GANG_STOP_METADATA_KEY, RESTORE_METADATA_KEY
from tests.conftest import SPEC
from tests.emulators.test_gang_replacement import boot, job_of, metadata, names, preempt, wire
from tests.emulators.test_gang_resize import N0, N1, N2, R1, elastic_gang, gang_stop, regroup, told
from tests.emulators.test_gangs import node

pytestmark = pytest.mark.emulators
S = JobSubstatus
R1_AGAIN = "sl-job1-a1-n1-g3-1"


def test_a_replacement_lost_before_it_joins_is_replaced_and_the_smaller_gang_trains_on(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    elastic_gang(call)
    start = len(host.requests)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    assert told(host, N2) == regroup(2, [N0, N2])
    for mid in ("p-r1", "p-r1-again"):  # redelivered: one more replacement
        preempt(call, R1, mid=mid)
    job = job_of(project)
    assert (job.status, job.substatus, job.attempt, job.preemptions, job.resizes) == (
        JobStatus.TRAINING,
        S.TRAINING,
        1,
        2,
        1,
    )
    assert job.nodes == [N0, R1_AGAIN, N2]
    assert [w for w in wire(host, start) if w.startswith("insert")] == [
        f"insert {R1}",
        f"insert {R1_AGAIN}",
    ]
    assert names(host) == [N0, R1_AGAIN, N2]
    assert metadata(host, R1_AGAIN)[RESTORE_METADATA_KEY] == "wait"
    record = job.attempts[0]
    assert [(r.lost, r.replacement) for r in record.replaced_nodes] == [
        (N1, R1),
        (R1, R1_AGAIN),
    ]
    # The new one up: the smaller gang is asked to stop, then grows back with it.
    boot(call, R1_AGAIN)
    assert metadata(host, N2)[GANG_STOP_METADATA_KEY] == "2"
    gang_stop(call, N0, 75, generation=2, mid="g0-2")
    for name in (N0, R1_AGAIN, N2):
        assert told(host, name) == regroup(3, [N0, R1_AGAIN, N2])
    job = job_of(project)
    assert (job.substatus, job.replacing, job.resizes, job.attempt) == (S.TRAINING, None, 2, 1)
    done = node(JobFinished, N0, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f0")
    assert job_of(project).status == JobStatus.COMPLETED


N3, R3 = "sl-job1-a1-n3", "sl-job1-a1-n3-g3"


def test_a_second_node_lost_while_shrunk_shrinks_again_then_all_grow_back_together(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", {**SPEC, "nodes": 4, "min_nodes": 2}, message_id="s1")
    for name in (N0, N1, N2, N3):
        beat = node(Heartbeat, name, phase="TRAINING", step=10)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")
    start = len(host.requests)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    assert told(host, N3) == regroup(2, [N0, N2, N3])
    # Node 3 lost too: node 0 saves at the gang's stop, and nodes 0 and 2 train on.
    gang_stop(call, N0, 60, generation=2, mid="g0-2")  # its report may come first
    for mid in ("p3", "p3-again"):
        preempt(call, N3, mid=mid)
    for name in (N0, N2):
        assert told(host, name) == regroup(3, [N0, N2])
    job = job_of(project)
    assert (job.substatus, job.attempt, job.preemptions, job.resizes) == (S.TRAINING, 1, 2, 2)
    assert job.nodes == [N0, R1, N2, R3] and job.attempts[0].checkpoint_step == 60
    inserts = [w for w in wire(host, start) if w.startswith("insert")]
    assert inserts == [f"insert {R1}", f"insert {R3}"]
    # One replacement up: nothing yet; both up: one stop, and all four regroup.
    boot(call, R3, mid="b3")
    assert GANG_STOP_METADATA_KEY not in metadata(host, N2)
    boot(call, R1, mid="b1")
    assert metadata(host, N2)[GANG_STOP_METADATA_KEY] == "3"
    gang_stop(call, N0, 90, generation=3, mid="g0-3")
    for name in (N0, R1, N2, R3):
        assert told(host, name) == regroup(4, [N0, R1, N2, R3])
    assert metadata(host, R3)[RESTORE_METADATA_KEY] == "go"
    job = job_of(project)
    assert (job.substatus, job.replacing, job.resizes, job.attempt) == (S.TRAINING, None, 3, 1)
    assert names(host) == [N0, R1, N2, R3]
    done = node(JobFinished, N0, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f0")
    assert job_of(project).status == JobStatus.COMPLETED


def test_the_reaper_finishes_a_second_loss_its_handler_left_after_writing_it(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The handler died once the loss and node 0's stop were on the job:
    the reaper inserts the second replacement (REINSERT_AFTER_S after the
    loss) and tells the rest to train on without it, the same values."""
    call("submit_job", "submit", {**SPEC, "nodes": 4, "min_nodes": 2}, message_id="s1")
    for name in (N0, N1, N2, N3):
        beat = node(Heartbeat, name, phase="TRAINING", step=10)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    store = FirestoreStore(project)
    now = datetime.now(UTC) - timedelta(seconds=40)

    def lost_then_saved(job: JobDoc) -> JobDoc:
        job = node_replacement.lost(job, N3, 1, S.PREEMPTED, now, f"{N3} preempted")
        return node_replacement.stopped(job, N0, 1, 60, None, 2)

    store.update_job("job1", lost_then_saved)
    assert R3 not in names(host)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert R3 in names(host) and metadata(host, R3)[RESTORE_METADATA_KEY] == "wait"
    for name in (N0, N2):
        assert told(host, name) == regroup(3, [N0, N2])
    job = job_of(project)
    assert (job.substatus, job.resizes, job.gang_generation) == (S.TRAINING, 2, 3)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t2")  # nothing more to do
    assert job_of(project).resizes == 2
