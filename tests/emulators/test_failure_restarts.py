"""The failure policy through the handlers: a non-zero exit
restarts the job on a new VM, apart from preemptions, and every order of
events restarts it at most once and counts each failure once. Real functions
framework, real Firestore emulator, VMs from the local cloud through GceCompute.
(The pure side is ``tests/unit/test_failure_policy.py``.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import Heartbeat, JobFinished, ReaperTick, SpotPreempted
from spotline.shared.domain import late_finish
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.gang_finish import HOLD_S
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from tests.conftest import SPEC
from tests.conftest import vm_event as event
from tests.emulators.test_gangs import deletes_and_inserts, held_since
from tests.emulators.test_recovery import log_sink_entry, names

pytestmark = pytest.mark.emulators

RESTARTS = {**SPEC, "max_restarts_on_errors": 1}


def training(
    call: Callable[..., Any], attempt: int = 1, spec: dict[str, Any] | None = None
) -> None:
    """Attempt ``attempt`` (submitted first, if 1) on its VM, training."""
    if attempt == 1:
        call("submit_job", "submit", spec or RESTARTS, message_id="submit")
    beat = event(Heartbeat, attempt=attempt, instance=f"sl-job1-a{attempt}", phase="TRAINING")
    call("on_epoch_done", "epoch_done", beat, message_id=f"hb{attempt}")


def exits(call: Callable[..., Any], code: int, attempt: int = 1, message_id: str = "f1") -> None:
    finished = event(JobFinished, attempt=attempt, instance=f"sl-job1-a{attempt}", exit_code=code)
    assert (
        call("on_job_finished", "job_finished", finished, message_id=message_id).status_code == 200
    )


def job_of(project: str) -> JobDoc:
    job = FirestoreStore(project).get_job("job1")
    assert job is not None
    return job


def restarted_once(project: str, host: LocalCloud) -> JobDoc:
    """Attempt 1 errored and restarted, counted once: attempt 2's VM placed,
    attempt 1's deleted."""
    job = job_of(project)
    assert (job.status, job.substatus) == (JobStatus.RECOVERING, JobSubstatus.CONNECTING_SERVER)
    assert (job.attempt, job.restarts_on_errors, job.preemptions) == (2, 1, 0)
    assert names(host) == ["sl-job1-a2"]
    first = FirestoreStore(project).get_instance("sl-job1-a1")
    assert first is not None and first.status == InstanceStatus.CLOSED
    assert [(r.attempt, r.outcome) for r in job.attempts] == [(1, "failed"), (2, None)]
    return job


def test_an_error_restarts_the_job_on_a_new_vm(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training(call)
    exits(call, 3)
    job = restarted_once(project, host)
    assert FirestoreStore(project).get_queue("job1") is None  # placed at once
    assert JobSubstatus.ERRORED in [h.substatus for h in job.history]


def test_a_redelivered_error_restarts_once(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training(call)
    exits(call, 3)
    once = restarted_once(project, host)
    exits(call, 3)  # the same message again
    exits(call, 3, message_id="f1-copy")  # the agent published it twice
    again = restarted_once(project, host)
    assert again.history == once.history


def test_a_late_error_of_attempt_1_while_attempt_2_trains_changes_nothing(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training(call)
    exits(call, 3)
    training(call, attempt=2)
    exits(call, 3, message_id="late")
    job = job_of(project)
    assert (job.status, job.attempt, job.restarts_on_errors) == (JobStatus.TRAINING, 2, 1)
    assert names(host) == ["sl-job1-a2"]


def test_a_preemption_reported_after_the_error_is_not_counted(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training(call)
    entry = log_sink_entry(host, "sl-job1-a1")  # read while the VM exists
    exits(call, 3)
    call("on_spot_preempted", "spot_preempted", entry, message_id="l1")
    call("on_spot_preempted", "spot_preempted", event(SpotPreempted), message_id="p1")
    restarted_once(project, host)


def test_an_error_reported_after_the_preemption_is_not_a_restart(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The preemption's SIGTERM killed the trainer: its exit 143 comes after
    the loss was recorded, and is stale."""
    training(call)
    call("on_spot_preempted", "spot_preempted", event(SpotPreempted), message_id="p1")
    exits(call, 143)
    job = job_of(project)
    assert (job.attempt, job.preemptions, job.restarts_on_errors) == (2, 1, 0)
    assert names(host) == ["sl-job1-a2"]


def test_the_limit_ends_the_job_naming_it_and_lets_the_vm_go(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training(call)
    exits(call, 3)
    training(call, attempt=2)
    exits(call, 3, attempt=2, message_id="f2")
    job = job_of(project)
    assert (job.status, job.attempt, job.restarts_on_errors) == (JobStatus.FAILED, 2, 1)
    assert job.error is not None
    assert "exited with code 3 on sl-job1-a2 after 1 restarts on errors" in job.error
    assert "(max_restarts_on_errors=1)" in job.error
    assert host.list() == []
    user = FirestoreStore(project).get_user("alice")
    assert user is not None and user.active_jobs == [] and user.active_instances == []


def test_a_listed_exit_code_restarts_without_error_restarts(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training(call, spec={**SPEC, "restart_on_exit_codes": [134]})
    exits(call, 134)
    job = job_of(project)
    assert (job.attempt, job.restarts_on_exit_codes, job.restarts_on_errors) == (2, 1, 0)
    assert names(host) == ["sl-job1-a2"]


def test_max_preemptions_ends_the_job_naming_it(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training(call, spec={**SPEC, "max_preemptions": 0})
    call("on_spot_preempted", "spot_preempted", event(SpotPreempted), message_id="p1")
    job = job_of(project)
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.FAILED, 1, 1)
    assert job.error is not None and "preempted 1 times (max_preemptions=0)" in job.error
    assert host.list() == []


@pytest.mark.parametrize(
    ("limit", "report"),
    [({"max_preemptions": 0}, "agent"), ({"max_attempts": 1}, "log-sink")],
)
def test_a_finish_of_exit_0_wins_over_the_limit_its_attempts_preemption_reached(
    call: Callable[..., Any], host: LocalCloud, project: str, limit: dict[str, int], report: str
) -> None:
    """The trainer exited 0 as its VM was taken: the preemption's report came
    first, reached the limit and FAILED the job, and the finish of the same
    attempt, the run's whole training done, was then dropped as too late."""
    training(call, spec={**SPEC, **limit})
    preemption = event(SpotPreempted) if report == "agent" else log_sink_entry(host, "sl-job1-a1")
    call("on_spot_preempted", "spot_preempted", preemption, message_id="p1")
    assert job_of(project).status == JobStatus.FAILED
    for _ in range(2):  # redelivered
        exits(call, 0)
        call("on_spot_preempted", "spot_preempted", preemption, message_id="p1")
    job = job_of(project)
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.COMPLETED, 1, 0)
    assert job.error is None
    assert [(r.attempt, r.outcome) for r in job.attempts] == [(1, "completed")]
    assert [h.substatus for h in job.history][-3:] == [
        JobSubstatus.PREEMPTED,
        JobSubstatus.FAILED,
        JobSubstatus.COMPLETED,
    ]
    user = FirestoreStore(project).get_user("alice")
    assert user is not None and user.active_jobs == []


def test_a_non_zero_exit_after_a_limit_reached_leaves_the_job_failed(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training(call, spec={**SPEC, "max_preemptions": 0})
    call("on_spot_preempted", "spot_preempted", event(SpotPreempted), message_id="p1")
    exits(call, 143)
    job = job_of(project)
    assert (job.status, job.preemptions) == (JobStatus.FAILED, 1)
    assert job.error is not None and "max_preemptions=0" in job.error


def test_a_workers_error_restarts_the_whole_gang(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", {**RESTARTS, "nodes": 2}, message_id="submit")
    assert names(host) == ["sl-job1-a1-n0", "sl-job1-a1-n1"]
    finished = event(JobFinished, instance="sl-job1-a1-n1", exit_code=3)
    call("on_job_finished", "job_finished", finished, message_id="f1")
    # Held for the notice window (another node's preemption would explain it),
    # then judged by the reaper.
    assert job_of(project).attempt == 1
    held_since(project, HOLD_S + 1)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    job = job_of(project)
    assert (job.attempt, job.restarts_on_errors) == (2, 1)
    assert names(host) == ["sl-job1-a2-n0", "sl-job1-a2-n1"]  # both old nodes gone


def test_a_restarted_gang_is_replaced_then_deleted_together(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """As a lost gang is (``tests/emulators/test_gangs.py``): the new gang, then every
    delete sent, then waited for; one after another, a gang of 3 waited for
    three 30 s deletes in a row before its restart was asked for, and then
    for all three together."""
    call("submit_job", "submit", {**RESTARTS, "nodes": 3}, message_id="submit")
    finished = event(JobFinished, instance="sl-job1-a1-n0", exit_code=3)
    call("on_job_finished", "job_finished", finished, message_id="f1")
    held_since(project, HOLD_S + 1)  # held for the notice window, then judged
    start = len(host.requests)
    call("on_job_finished", "job_finished", finished, message_id="f1")
    seen = deletes_and_inserts(host, start)
    assert "delete" not in seen[: seen.index("insert")], seen
    after = seen[seen.index("insert") :]
    deletes_at = after.index("delete")
    assert after[deletes_at : deletes_at + 6] == ["delete"] * 3 + ["wait"] * 3, seen
    assert names(host) == [f"sl-job1-a2-n{i}" for i in range(3)]


def test_the_reaper_finishes_a_restart_whose_function_died(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart is written on the job, and the function dies before it lets
    the old VM go or places the next attempt: the reaper does both."""
    training(call)
    store = FirestoreStore(project)
    finished = event(JobFinished, exit_code=3)
    store.update_job("job1", lambda job: late_finish.job_finished(job, finished, job.updated_at))
    assert names(host) == ["sl-job1-a1"]
    monkeypatch.setenv("SPOTLINE_REQUEST_TIMEOUT_S", "0")
    deps.reset()
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    restarted_once(project, host)
