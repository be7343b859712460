"""A gang node's non-zero exit reported before another node's preemption:
the noticed node's ranks stopped, node 0's rank died in the next collective,
and node 0's agent, which had no notice, reported JobFinished with exit 1
first. That is the gang's preemption, not its failure: the finish is held for
the notice window (``spotline.shared.domain.gang_finish``), a preemption of
any node of the attempt meanwhile ends the attempt as a preemption, and with
none the reaper judges the finish once the window has passed. Through the
real handlers, with the local cloud's VMs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import Heartbeat, JobFinished, ReaperTick, SpotPreempted
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.gang_finish import HOLD_S
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.conftest import SPEC
from tests.emulators.test_gangs import N0, N1, deleted, held_since, names, node
from tests.emulators.test_recovery import log_sink_entry

pytestmark = pytest.mark.emulators
GANG = {**SPEC, "nodes": 2}
NEXT = ["sl-job1-a2-n0", "sl-job1-a2-n1"]


def job_of(project: str) -> JobDoc:
    job = FirestoreStore(project).get_job("job1")
    assert job is not None
    return job


def training_gang(call: Callable[..., Any], spec: dict[str, Any] | None = None) -> None:
    call("submit_job", "submit", spec or GANG, message_id="s1")
    for name in (N0, N1):
        beat = node(Heartbeat, name, phase="TRAINING", step=10)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")


def crash(call: Callable[..., Any], name: str = N0, code: int = 1, attempt: int = 1) -> None:
    finished = node(JobFinished, name, attempt=attempt, exit_code=code, log_tail="peer gone\n")
    reply = call("on_job_finished", "job_finished", finished, message_id=f"f-{name}-{attempt}")
    assert reply.status_code == 200


@pytest.mark.parametrize("report", ["agent", "log-sink"])
@pytest.mark.parametrize("restarts", [0, 1])
def test_a_peers_exit_before_the_noticed_nodes_report_is_a_preemption(
    call: Callable[..., Any], host: LocalCloud, project: str, report: str, restarts: int
) -> None:
    training_gang(call, {**GANG, "max_restarts_on_errors": restarts})
    entry = log_sink_entry(host, N1, host.get(N1)["zone"])  # type: ignore[index]
    for _ in range(2):  # redelivered
        crash(call)
    job = job_of(project)
    # Held: no failure, no restart spent, the gang still on its VMs.
    assert (job.status, job.attempt, job.restarts_on_errors) == (JobStatus.TRAINING, 1, 0)
    assert job.held_finish is not None and job.held_finish.event.token == ""
    assert names(host) == [N0, N1]

    notice = node(SpotPreempted, N1) if report == "agent" else entry
    for _ in range(2):
        call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    crash(call)  # late: of an attempt that has ended
    job = job_of(project)
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.RECOVERING, 2, 1)
    assert (job.restarts_on_errors, job.held_finish, job.error) == (0, None, None)
    assert (job.attempts[0].attempt, job.attempts[0].outcome) == (1, "preempted")
    if report == "agent":  # the log sink's report keeps the noticed VM through its notice
        assert names(host) == NEXT


def test_a_held_finish_with_no_preemption_is_judged_by_the_reaper(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    crash(call)
    crash(call, N1, code=134)  # the second node's: the first one held is judged
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert job_of(project).status == JobStatus.TRAINING  # within the window: kept
    held_since(project, HOLD_S + 1)
    start = len(host.requests)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t2")
    job = job_of(project)
    assert (job.status, job.substatus, job.held_finish) == (
        JobStatus.FAILED,
        JobSubstatus.FAILED,
        None,
    )
    assert job.error is not None and f"exited with code 1 on {N0}" in job.error
    assert sorted(deleted(host, start)) == [N0, N1]  # every node, at once
    user = FirestoreStore(project).get_user("alice")
    assert user is not None and user.active_jobs == [] and user.active_instances == []
    call("reaper", "reaper_tick", ReaperTick(), message_id="t3")  # judged once
    assert job_of(project).history[-1].substatus == JobSubstatus.FAILED


def test_a_held_finish_past_its_window_restarts_the_gang_once_on_redelivery(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Its own redelivery after the window judges it too: the failure policy
    restarts the gang, once, whichever of the two comes first."""
    training_gang(call, {**GANG, "max_restarts_on_errors": 1})
    crash(call)
    held_since(project, HOLD_S + 1)
    crash(call)  # redelivered past the window
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    job = job_of(project)
    assert (job.attempt, job.restarts_on_errors, job.preemptions) == (2, 1, 0)
    assert names(host) == NEXT


def test_node_0s_exit_0_ends_the_job_whatever_a_worker_said(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    crash(call, N1)
    done = node(JobFinished, N0, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f0")
    job = job_of(project)
    assert (job.status, job.held_finish) == (JobStatus.COMPLETED, None)
