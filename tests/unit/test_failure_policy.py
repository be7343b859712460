"""The failure policy, pure: restarts on errors apart from preemptions
(``max_restarts_on_errors``, ``restart_on_exit_codes``, ``max_preemptions``),
and the orders of events that must restart a job at most once and count each
failure once (the handlers' side is ``tests/emulators/test_failure_restarts.py``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.shared.contract.events import JobFinished
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.late_finish import job_finished
from spotline.shared.domain.lifecycle import StaleEvent, new_job, vm_lost, vm_recorded
from spotline.shared.domain.spec import JobSpec, parse_spec
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.transitions import move_job

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
S = JobSubstatus


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def submitted(**spec: Any) -> JobDoc:
    return new_job(
        JobSpec(user="alice", machine_ids=["g2-standard-4"], command=["train"], **spec),
        "job1",
        "m1",
        T0,
    )


def training(job: JobDoc, start: float = 1) -> JobDoc:
    """The job's current attempt on its VM, training."""
    name = f"sl-job1-a{job.attempt}"
    job = vm_recorded(job, name, "zone-a", "g2-standard-4", at(start), 0.28, 0.71)
    return move_job(job, S.TRAINING, at(start + 1))


def finish(attempt: int, exit_code: int, sent: float = 50) -> JobFinished:
    return JobFinished(
        job_id="job1",
        attempt=attempt,
        instance=f"sl-job1-a{attempt}",
        sent_at=at(sent),
        exit_code=exit_code,
    )


def test_by_default_a_non_zero_exit_fails_the_job_at_once() -> None:
    job = job_finished(training(submitted()), finish(1, 3), at(60))
    assert (job.status, job.attempt, job.restarts_on_errors) == (JobStatus.FAILED, 1, 0)
    assert job.error is not None and "exited with code 3" in job.error


def test_an_error_restarts_the_job_on_a_new_attempt_until_the_limit() -> None:
    job = training(submitted(max_restarts_on_errors=2))
    for attempt in (1, 2):
        job = job_finished(job, finish(attempt, 3), at(attempt * 100))
        assert (job.status, job.substatus) == (JobStatus.RECOVERING, S.REQUESTING_SERVER)
        assert (job.attempt, job.restarts_on_errors) == (attempt + 1, attempt)
        assert job.instance is None and job.preemptions == 0
        job = training(job, start=attempt * 100 + 1)
    job = job_finished(job, finish(3, 3), at(400))
    assert (job.status, job.attempt, job.restarts_on_errors) == (JobStatus.FAILED, 3, 2)
    assert job.error is not None
    assert "exited with code 3 on sl-job1-a3 after 2 restarts on errors" in job.error
    assert "(max_restarts_on_errors=2)" in job.error
    outcomes = [(r.attempt, r.outcome) for r in job.attempts]
    assert outcomes == [(1, "failed"), (2, "failed"), (3, "failed")]
    assert [h.substatus for h in job.history].count(S.ERRORED) == 2


def test_listed_exit_codes_restart_without_spending_the_error_restarts() -> None:
    job = training(submitted(restart_on_exit_codes=[134], max_attempts=3))
    job = training(job_finished(job, finish(1, 134), at(100)), start=101)
    job = training(job_finished(job, finish(2, 134), at(200)), start=201)
    assert (job.attempt, job.restarts_on_exit_codes, job.restarts_on_errors) == (3, 2, 0)
    # max_attempts still caps the VMs tried, listed codes included.
    ended = job_finished(job, finish(3, 134), at(300))
    assert ended.status == JobStatus.FAILED
    assert ended.error is not None and "max_attempts=3" in ended.error
    # A code not in the list, with no restarts on errors allowed, fails at once.
    other = job_finished(job, finish(3, 1), at(300))
    assert other.status == JobStatus.FAILED and "exited with code 1" in (other.error or "")


def test_exit_zero_still_completes() -> None:
    job = job_finished(training(submitted(max_restarts_on_errors=2)), finish(1, 0), at(60))
    assert (job.status, job.restarts_on_errors) == (JobStatus.COMPLETED, 0)


def test_a_redelivered_error_restarts_once_and_counts_once() -> None:
    job = training(submitted(max_restarts_on_errors=3))
    once = job_finished(job, finish(1, 3), at(60))
    with pytest.raises(StaleEvent):
        job_finished(once, finish(1, 3), at(61))
    assert (once.attempt, once.restarts_on_errors) == (2, 1)


def test_a_late_error_of_an_old_attempt_changes_nothing_once_the_next_runs() -> None:
    job = training(submitted(max_restarts_on_errors=3))
    job = training(job_finished(job, finish(1, 3), at(60)), start=61)
    for late in (finish(1, 3, sent=59), finish(1, 7, sent=59)):
        with pytest.raises(StaleEvent):
            job_finished(job, late, at(120))
    assert (job.status, job.attempt, job.restarts_on_errors) == (JobStatus.TRAINING, 2, 1)


def test_an_error_reported_after_the_preemption_is_not_a_restart() -> None:
    """The preemption's SIGTERM killed the trainer: the loss is recorded first,
    then its exit code 143 arrives; one preemption, no restart on errors."""
    job = training(submitted(max_restarts_on_errors=3))
    lost = vm_lost(job, "sl-job1-a1", 1, S.PREEMPTED, at(60), note="preempted")
    with pytest.raises(StaleEvent):
        job_finished(lost, finish(1, 143), at(61))
    assert (lost.attempt, lost.preemptions, lost.restarts_on_errors) == (2, 1, 0)


def test_a_preemption_reported_after_the_error_restart_is_stale() -> None:
    job = training(submitted(max_restarts_on_errors=3))
    restarted = job_finished(job, finish(1, 3), at(60))
    with pytest.raises(StaleEvent):
        vm_lost(restarted, "sl-job1-a1", 1, S.PREEMPTED, at(61), note="preempted")
    assert (restarted.attempt, restarted.preemptions, restarted.restarts_on_errors) == (2, 0, 1)


def test_max_preemptions_recovers_that_many_then_fails() -> None:
    job = training(submitted(max_preemptions=2))
    for attempt in (1, 2):
        job = vm_lost(job, f"sl-job1-a{attempt}", attempt, S.PREEMPTED, at(attempt * 100), "p")
        assert (job.substatus, job.preemptions) == (S.REQUESTING_SERVER, attempt)
        job = training(job, start=attempt * 100 + 1)
    job = vm_lost(job, "sl-job1-a3", 3, S.PREEMPTED, at(300), "p")
    assert (job.status, job.preemptions) == (JobStatus.FAILED, 3)
    assert job.error is not None and "preempted 3 times (max_preemptions=2)" in job.error


def test_stalls_and_error_restarts_do_not_count_as_preemptions() -> None:
    job = training(submitted(max_preemptions=0, max_restarts_on_errors=1))
    job = training(vm_lost(job, "sl-job1-a1", 1, S.STALLED, at(60), "silent"), start=61)
    job = training(job_finished(job, finish(2, 3), at(120)), start=121)
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.TRAINING, 3, 0)


def test_no_limit_on_preemptions_by_default_but_max_attempts() -> None:
    job = training(submitted(max_attempts=2))
    job = training(vm_lost(job, "sl-job1-a1", 1, S.PREEMPTED, at(60), "p"), start=61)
    job = vm_lost(job, "sl-job1-a2", 2, S.PREEMPTED, at(120), "p")
    assert job.status == JobStatus.FAILED and "max_attempts=2" in (job.error or "")


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("max_restarts_on_errors", -1, "max_restarts_on_errors: .*greater than or equal to 0"),
        ("restart_on_exit_codes", [0], r"restart_on_exit_codes\.0: .*greater than or equal to 1"),
        ("restart_on_exit_codes", [256], r"restart_on_exit_codes\.0: .*less than or equal to 255"),
        ("restart_on_exit_codes", ["SIGNOPE"], r"restart_on_exit_codes\.0: .*'SIGNOPE' is not"),
        ("restart_on_exit_codes", [True], r"restart_on_exit_codes\.0: "),
        ("max_preemptions", -1, "max_preemptions: .*greater than or equal to 0"),
        ("avoid_preempted_zone_s", -5, "avoid_preempted_zone_s: .*greater than or equal to 0"),
    ],
)
def test_bad_policy_fields_are_refused_naming_the_field(
    field: str, value: object, problem: str
) -> None:
    spec = {"user": "alice", "machine_ids": ["g2-standard-4"], "command": ["x"], field: value}
    with pytest.raises(InvalidMessage, match=problem):
        parse_spec(json.dumps(spec).encode())


def test_the_history_says_on_which_account_each_restart_was_made() -> None:
    job = training(submitted(max_restarts_on_errors=2, restart_on_exit_codes=[134]))
    job = training(job_finished(job, finish(1, 3), at(100)), start=101)
    job = job_finished(job, finish(2, 134), at(200))
    notes = [h.note for h in job.history if h.substatus == S.ERRORED]
    assert notes == [
        "sl-job1-a1 exited with code 3; restart 1 of max_restarts_on_errors=2",
        "sl-job1-a2 exited with code 134; 134 is in restart_on_exit_codes",
    ]


def test_a_signal_name_in_restart_on_exit_codes_is_the_code_of_a_death_by_it() -> None:
    """The agent reports a trainer killed by signal N as 128+N, as a shell
    does; the spec may name the signal (a flaky NCCL error aborts: SIGABRT)."""
    spec = {
        "user": "alice",
        "machine_ids": ["g2-standard-4"],
        "command": ["x"],
        "restart_on_exit_codes": ["SIGABRT", "SIGKILL", 3, "SIGSEGV", 134],
    }
    parsed = parse_spec(json.dumps(spec).encode())
    assert parsed.restart_on_exit_codes == [134, 137, 3, 139, 134]
    job = training(submitted(restart_on_exit_codes=["SIGABRT"], max_attempts=3))
    job = job_finished(job, finish(1, 134), at(60))
    assert (job.attempt, job.restarts_on_exit_codes, job.status) == (2, 1, JobStatus.RECOVERING)
