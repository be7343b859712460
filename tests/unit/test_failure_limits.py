"""Which limit of the failure policy ended a job (``failure_policy.ending_limit``),
pure, and how each attempt ended (``failure_policy.attempt_endings``): what
the dashboard shows beside the counters, read from the job the handlers left."""

from __future__ import annotations

from typing import Any

from spotline.shared.domain import failure_policy
from spotline.shared.domain.lifecycle import vm_lost
from spotline.shared.domain.transitions import fail_job
from tests.unit.test_failure_policy import S, at, finish, job_finished, submitted, training


def errored_then(**spec: Any) -> Any:
    """Attempt 1 exits 3 and is restarted (max_restarts_on_errors=1); attempt 2 trains."""
    job = job_finished(training(submitted(max_restarts_on_errors=1, **spec)), finish(1, 3), at(60))
    return training(job, start=70)


def test_a_preemption_past_max_preemptions_names_that_limit() -> None:
    job = vm_lost(errored_then(max_preemptions=0), "sl-job1-a2", 2, S.PREEMPTED, at(90), "gone")
    assert failure_policy.ending_limit(job) == "max_preemptions=0 (1 preemption)"
    endings = failure_policy.attempt_endings(job)
    assert endings == {1: "RECOVERING/ERRORED", 2: "RECOVERING/PREEMPTED"}


def test_the_last_error_past_max_restarts_on_errors_names_that_limit() -> None:
    job = job_finished(errored_then(), finish(2, 3), at(120))
    assert failure_policy.ending_limit(job) == "max_restarts_on_errors=1 (1 restart on errors)"
    assert failure_policy.attempt_endings(job)[2] == "FAILED/FAILED"


def test_max_attempts_ends_a_job_whatever_ended_its_last_attempt() -> None:
    job = vm_lost(errored_then(max_attempts=2), "sl-job1-a2", 2, S.STALLED, at(90), "silent")
    assert failure_policy.ending_limit(job) == "max_attempts=2 (2 attempts)"


def test_no_limit_ended_a_job_that_runs_completed_or_failed_otherwise() -> None:
    running = errored_then()
    assert failure_policy.ending_limit(running) is None
    assert failure_policy.attempt_endings(running) == {1: "RECOVERING/ERRORED"}
    assert failure_policy.ending_limit(job_finished(running, finish(2, 0), at(99))) is None
    # With no restart allowed (the default), the error fails the job: no limit
    # was set, as the error's reason says (``error_reason``).
    assert (
        failure_policy.ending_limit(job_finished(training(submitted()), finish(1, 3), at(9)))
        is None
    )
    unplaceable = fail_job(submitted(), S.FAILED, at(5), "Compute Engine refuses every option")
    assert failure_policy.ending_limit(unplaceable) is None
