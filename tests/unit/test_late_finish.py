"""``spotline.shared.domain.late_finish``, pure: a JobFinished of the attempt before the
current one, come after its VM's loss was recorded (the finish-vs-preempt race;
the handlers' side is ``tests/unit/test_finish_race.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.shared.contract.events import JobFinished
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.late_finish import SUPERSEDED, ended_after_loss, job_finished
from spotline.shared.domain.lifecycle import StaleEvent, new_job, vm_lost, vm_recorded
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.transitions import move_job

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
S = JobSubstatus


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def lost_on_attempt_1(cause: JobSubstatus = S.PREEMPTED, **spec: Any) -> JobDoc:
    """Trained on sl-job1-a1, then its loss recorded: attempt 2 in REQUESTING_SERVER."""
    job = new_job(
        JobSpec(user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp", **spec),
        "job1",
        "m1",
        T0,
    )
    nodes = [f"sl-job1-a1-n{r}" for r in range(spec.get("nodes", 1))]
    leader = nodes[0] if len(nodes) > 1 else "sl-job1-a1"
    job = vm_recorded(
        job,
        leader,
        "z",
        "g2-standard-4",
        at(1),
        0.28,
        0.71,
        nodes=nodes if len(nodes) > 1 else None,
    )
    job = move_job(job, S.TRAINING, at(2))
    return vm_lost(job, leader, 1, cause, at(60), note="lost")


def finish(
    attempt: int = 1, exit_code: int = 0, instance: str = "sl-job1-a1", **more: Any
) -> JobFinished:
    return JobFinished(
        job_id="job1",
        attempt=attempt,
        instance=instance,
        sent_at=at(59),
        exit_code=exit_code,
        **more,
    )


def test_a_late_finish_while_waiting_for_capacity_completes_attempt_1() -> None:
    waiting = move_job(lost_on_attempt_1(), S.WAITING_FOR_CAPACITY, at(61))
    assert (waiting.attempt, waiting.preemptions) == (2, 1)
    job = job_finished(waiting, finish(), at(70))
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.COMPLETED, 1, 0)
    assert (job.instance, job.zone, job.machine_id) == ("sl-job1-a1", "z", "g2-standard-4")
    assert [(r.attempt, r.outcome) for r in job.attempts] == [(1, "completed")]
    assert job.history[-1].attempt == 1 and ended_after_loss(job)
    # Attempt 1's VM time is billed up to its loss, once.
    assert job.cost_usd == job.attempts[0].cost_usd > 0
    assert job_finished(job, finish(), at(80)) == job  # redelivered


def test_the_next_attempts_vm_is_superseded_and_billed() -> None:
    booting = vm_recorded(lost_on_attempt_1(), "sl-job1-a2", "z", "g2-standard-4", at(61), 0.28)
    job = job_finished(booting, finish(), at(70))
    assert job.status == JobStatus.COMPLETED
    first, second = job.attempts
    assert (second.attempt, second.outcome, second.ended_at) == (2, SUPERSEDED, at(70))
    assert second.cost_usd > 0 and job.cost_usd == round(first.cost_usd + second.cost_usd, 6)


def test_a_stall_is_undone_without_touching_the_preemptions() -> None:
    job = job_finished(lost_on_attempt_1(S.STALLED), finish(), at(70))
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.COMPLETED, 1, 0)


def test_a_gangs_late_finish_restores_its_nodes_and_only_node_0_ends_it() -> None:
    lost = lost_on_attempt_1(nodes=2)
    with pytest.raises(StaleEvent):
        job_finished(lost, finish(instance="sl-job1-a1-n1"), at(70))
    job = job_finished(lost, finish(instance="sl-job1-a1-n0"), at(70))
    assert job.status == JobStatus.COMPLETED
    assert job.nodes == ["sl-job1-a1-n0", "sl-job1-a1-n1"]


@pytest.mark.parametrize("exit_code", [1, 143, -15])
def test_a_late_non_zero_exit_is_stale(exit_code: int) -> None:
    with pytest.raises(StaleEvent):
        job_finished(lost_on_attempt_1(), finish(exit_code=exit_code), at(70))


def test_a_late_finish_once_the_next_attempt_trains_is_a_note() -> None:
    training = vm_recorded(lost_on_attempt_1(), "sl-job1-a2", "z", "g2-standard-4", at(61))
    training = move_job(training, S.TRAINING, at(65))
    job = job_finished(training, finish(), at(70))
    assert (job.status, job.substatus, job.attempt, job.preemptions) == (
        JobStatus.TRAINING,
        S.TRAINING,
        2,
        1,
    )
    assert "attempt 1 finished (exit 0)" in job.history[-1].note
    assert job.history[-1].substatus == S.TRAINING and len(job.history) == len(training.history) + 1
    assert job_finished(job, finish(), at(80)) == job  # once


def test_a_finish_from_an_older_attempt_or_another_vm_is_stale() -> None:
    lost = lost_on_attempt_1()
    with pytest.raises(StaleEvent):
        job_finished(lost, finish(instance="sl-other-a1"), at(70))
    again = vm_recorded(lost, "sl-job1-a2", "z", "g2-standard-4", at(61))
    third = vm_lost(again, "sl-job1-a2", 2, S.PREEMPTED, at(62), note="lost")
    with pytest.raises(StaleEvent):
        job_finished(third, finish(attempt=1), at(70))


def test_an_ended_job_keeps_its_end() -> None:
    canceled = move_job(lost_on_attempt_1(), S.CANCELED, at(61))
    with pytest.raises(StaleEvent):
        job_finished(canceled, finish(), at(70))


def test_a_vm_made_for_an_ended_job_is_not_recorded_on_it() -> None:
    """A late finish took the job back to attempt 1 while attempt 2's VM was
    being made: recording it would overwrite attempt 1's record."""
    done = job_finished(lost_on_attempt_1(), finish(), at(70))
    assert vm_recorded(done, "sl-job1-a2", "z", "g2-standard-4", at(71)) == done
