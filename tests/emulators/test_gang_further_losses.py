"""A gang waiting for its replacement loses another node, through the real
handlers with the local cloud's VMs: that node is replaced too, the
attempt and node 0's VM kept, and the gang regroups once both replacements
are up (``spotline.shared.domain.further_losses``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.events import Heartbeat, JobFinished, ReaperTick
from spotline.shared.domain import node_replacement
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.vms import JOB_METADATA_KEY, RESTORE_METADATA_KEY
from tests.conftest import SPEC
from tests.emulators.test_gang_replacement import boot, job_of, metadata, names, preempt, wire
from tests.emulators.test_gang_resize import N0, N1, N2, R1, gang_stop, regroup, told
from tests.emulators.test_gangs import node
from tests.emulators.test_recovery import log_sink_entry

pytestmark = pytest.mark.emulators
S = JobSubstatus
R2 = "sl-job1-a1-n2-g2"  # made at the gang's next generation
R0 = "sl-job1-a1-n0-g2"


def three_training(call: Callable[..., Any]) -> None:
    call("submit_job", "submit", {**SPEC, "nodes": 3}, message_id="s1")
    for name in (N0, N1, N2):
        beat = node(Heartbeat, name, phase="TRAINING", step=10)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")


def test_a_second_node_lost_while_waiting_is_replaced_and_the_gang_regroups_with_both(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    three_training(call)
    kept = host.get(N0)
    assert kept is not None
    start = len(host.requests)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    for mid in ("p2", "p2-again"):  # redelivered: still one more replacement
        preempt(call, N2, mid=mid)
    job = job_of(project)
    assert (job.status, job.substatus, job.attempt, job.preemptions) == (
        JobStatus.RECOVERING,
        S.REPLACING_NODE,
        1,
        2,
    )
    assert job.nodes == [N0, R1, R2] and job.attempts[0].checkpoint_step == 40
    inserts = [w for w in wire(host, start) if w.startswith("insert")]
    assert inserts == [f"insert {R1}", f"insert {R2}"]
    assert names(host) == [N0, R1, R2]
    record = job.attempts[0]
    assert [(r.lost, r.replacement) for r in record.replaced_nodes] == [(N1, R1), (N2, R2)]
    # The first replacement was made with the list naming node 2: the regroup's is newer.
    made = Assignment.model_validate_json(metadata(host, R1)[JOB_METADATA_KEY])
    assert (made.nodes, made.generation) == ([N0, R1, N2], 1)
    boot(call, R1, mid="b1")
    assert told(host, N0) is None and job_of(project).substatus == S.REPLACING_NODE
    boot(call, R2, mid="b2")
    for name in (N0, R1, R2):
        assert told(host, name) == regroup(2, [N0, R1, R2])
        assert metadata(host, name).get(RESTORE_METADATA_KEY, "go") == "go"
    job = job_of(project)
    assert (job.substatus, job.attempt, job.replacing, job.gang_generation) == (
        S.TRAINING,
        1,
        None,
        2,
    )
    assert host.get(N0) is not None and host.get(N0)["id"] == kept["id"]  # type: ignore[index]
    done = node(JobFinished, N0, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f0")
    assert job_of(project).status == JobStatus.COMPLETED


def test_node_zero_lost_second_regroups_only_once_its_agent_reports_its_save(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Node 0's stop report had not come when the log sink reported its
    loss (the notice's start): the regroup waits for its agent's report."""
    three_training(call)
    preempt(call, N1, step=38)
    call("on_spot_preempted", "spot_preempted", log_sink_entry(host, N0), message_id="ls")
    job = job_of(project)
    assert (job.substatus, job.attempt, job.nodes) == (S.REPLACING_NODE, 1, [R0, R1, N2])
    boot(call, R1, mid="b1")
    boot(call, R0, mid="b0")
    assert told(host, N2) is None
    preempt(call, N0, step=40, mid="p0-agent")  # stale as a loss; its save completes the wait
    for name in (R0, R1, N2):
        assert told(host, name) == regroup(2, [R0, R1, N2])
    job = job_of(project)
    assert (job.substatus, job.attempt, job.attempts[0].checkpoint_step) == (S.TRAINING, 1, 40)


def test_an_elastic_gangs_smaller_head_lost_shrinks_again_headed_by_the_next_node(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    n3, r0 = "sl-job1-a1-n3", "sl-job1-a1-n0-g3"
    call("submit_job", "submit", {**SPEC, "nodes": 4, "min_nodes": 2}, message_id="s1")
    for name in (N0, N1, N2, n3):
        beat = node(Heartbeat, name, phase="TRAINING", step=10)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")
    start = len(host.requests)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    assert told(host, n3) == regroup(2, [N0, N2, n3])
    # Node 0, the smaller gang's head, is lost: its agent reports after saving.
    preempt(call, N0, step=60, mid="p0")
    for name in (N2, n3):
        assert told(host, name) == regroup(3, [N2, n3])
    job = job_of(project)
    assert (job.substatus, job.attempt, job.preemptions, job.resizes) == (S.TRAINING, 1, 2, 2)
    assert job.nodes == [r0, R1, N2, n3] and job.attempts[0].checkpoint_step == 60
    inserts = [w for w in wire(host, start) if w.startswith("insert")]
    assert inserts == [f"insert {R1}", f"insert {r0}"]
    # Both up: the smaller gang's new head saves at the stop, and all four regroup.
    boot(call, R1, mid="b1")
    boot(call, r0, mid="b0")
    gang_stop(call, N2, 90, generation=3, mid="g2-3")
    for name in (r0, R1, N2, n3):
        assert told(host, name) == regroup(4, [r0, R1, N2, n3])
    job = job_of(project)
    assert (job.substatus, job.replacing, job.attempt, job.resizes) == (S.TRAINING, None, 1, 3)
    done = node(JobFinished, r0, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f0")
    assert job_of(project).status == JobStatus.COMPLETED


def test_the_reaper_inserts_the_second_replacement_a_handler_left_after_writing_the_loss(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The handler died once node 2's loss was on the job: the reaper inserts
    its replacement (REINSERT_AFTER_S after the loss), and the gang regroups
    with both once they are up."""
    three_training(call)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    then = datetime.now(UTC) - timedelta(seconds=40)
    FirestoreStore(project).update_job(
        "job1",
        lambda job: node_replacement.lost(job, N2, 1, S.PREEMPTED, then, f"{N2} preempted"),
    )
    assert R2 not in names(host)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert R2 in names(host) and metadata(host, R2)[RESTORE_METADATA_KEY] == "wait"
    boot(call, R1, mid="b1")
    boot(call, R2, mid="b2")
    for name in (N0, R1, R2):
        assert told(host, name) == regroup(2, [N0, R1, R2])
    job = job_of(project)
    assert (job.substatus, job.attempt, job.replacing) == (S.TRAINING, 1, None)
