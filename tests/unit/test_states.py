from datetime import UTC, datetime, timedelta

import pytest

from spotline.shared.domain.documents import InstanceDoc, JobDoc
from spotline.shared.domain.errors import IllegalTransition
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import (
    JOB_TRANSITIONS,
    InstanceStatus,
    InstanceSubstatus,
    JobStatus,
    JobSubstatus,
    job_status_for,
)
from spotline.shared.domain.transitions import fail_job, move_instance, move_job
from spotline.shared.domain.vms import Provisioning

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
S = JobSubstatus


def job() -> JobDoc:
    spec = JobSpec(user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp")
    return new_job(spec, "job1", "m1", T0)


def test_every_substatus_has_a_row() -> None:
    assert set(JOB_TRANSITIONS) == set(JobSubstatus)


def test_the_happy_path_is_legal_and_recorded() -> None:
    current = job()
    path = [
        S.CONNECTING_SERVER,
        S.GEARING_UP_ENV,
        S.SENDING_MODEL_AND_DATA,
        S.TRAINING,
        S.RETURNING,
        S.COMPLETED,
    ]
    for i, step in enumerate(path, start=1):
        current = move_job(current, step, T0 + timedelta(seconds=i))
    assert current.status == JobStatus.COMPLETED
    assert [h.substatus for h in current.history] == [S.REQUESTING_SERVER, *path]
    assert current.history[-1].at == T0 + timedelta(seconds=len(path))
    assert current.updated_at == T0 + timedelta(seconds=len(path))


def test_a_terminal_job_never_moves_again() -> None:
    done = fail_job(job(), S.CANCELED, T0, "canceled by the user")
    assert done.error == "canceled by the user"
    for target in JobSubstatus:
        if target == S.CANCELED:
            continue
        with pytest.raises(IllegalTransition, match="CANCELED"):
            move_job(done, target, T0)


def test_a_late_event_cannot_move_backwards() -> None:
    training = move_job(move_job(job(), S.CONNECTING_SERVER, T0), S.TRAINING, T0)
    with pytest.raises(IllegalTransition, match="TRAINING -> GEARING_UP_ENV"):
        move_job(training, S.GEARING_UP_ENV, T0)


def test_moving_to_the_current_state_changes_nothing() -> None:
    current = job()
    assert move_job(current, S.REQUESTING_SERVER, T0 + timedelta(hours=1)) is current


def test_status_is_derived_from_substatus_and_attempt() -> None:
    assert job_status_for(S.CONNECTING_SERVER, 1) == JobStatus.QUEUING
    assert job_status_for(S.CONNECTING_SERVER, 2) == JobStatus.RECOVERING
    assert job_status_for(S.PREEMPTED, 1) == JobStatus.RECOVERING
    assert job_status_for(S.RETURNING, 3) == JobStatus.TRAINING
    assert job_status_for(S.FAILED, 2) == JobStatus.FAILED


def test_no_capacity_is_a_wait_not_an_end() -> None:
    waiting = move_job(job(), S.WAITING_FOR_CAPACITY, T0)
    assert waiting.status == JobStatus.QUEUING
    assert move_job(waiting, S.REQUESTING_SERVER, T0).substatus == S.REQUESTING_SERVER
    for lost in (S.PREEMPTED, S.STALLED, S.TRAINING):  # it has no VM to lose or train on
        with pytest.raises(IllegalTransition):
            move_job(waiting, lost, T0)


def test_a_job_waiting_for_its_next_attempt_may_still_complete() -> None:
    """The attempt before finished just before its VM was lost, and the finish
    came after the loss was recorded (``spotline.shared.domain.late_finish``)."""
    for waiting in (S.REQUESTING_SERVER, S.WAITING_FOR_CAPACITY, S.WAITING_FOR_QUOTA):
        assert S.COMPLETED in JOB_TRANSITIONS[waiting]


def instance() -> InstanceDoc:
    return InstanceDoc(
        name="vm",
        job_id="job1",
        user="alice",
        attempt=1,
        machine_id="g2-standard-4",
        machine_type="g2-standard-4",
        zone="z",
        provisioning=Provisioning.SPOT,
        created_at=T0,
        updated_at=T0,
    )


def test_instance_moves_and_substatus_must_fit_the_status() -> None:
    running = move_instance(instance(), InstanceStatus.EXECUTING, T0)
    closing = move_instance(running, InstanceStatus.CLOSING, T0, InstanceSubstatus.TERMINATING)
    closed = move_instance(closing, InstanceStatus.CLOSED, T0, InstanceSubstatus.TERMINATED)
    assert closed.closed_at == T0
    assert [h.status for h in closed.history] == ["EXECUTING", "CLOSING", "CLOSED"]
    with pytest.raises(IllegalTransition, match="cannot carry"):
        move_instance(running, InstanceStatus.CLOSED, T0, InstanceSubstatus.STOPPING)
    with pytest.raises(IllegalTransition, match="never moves again"):
        move_instance(closed, InstanceStatus.EXECUTING, T0)
    with pytest.raises(IllegalTransition, match="never moves again"):
        move_instance(closed, InstanceStatus.LAUNCHING, T0)


def test_only_a_stopped_instance_is_restarted_or_deleted_after_closing() -> None:
    stopping = move_instance(instance(), InstanceStatus.CLOSING, T0, InstanceSubstatus.STOPPING)
    stopped = move_instance(stopping, InstanceStatus.CLOSED, T0, InstanceSubstatus.STOPPED)
    assert move_instance(stopped, InstanceStatus.LAUNCHING, T0).status == "LAUNCHING"
    deleted = move_instance(stopped, InstanceStatus.CLOSED, T0, InstanceSubstatus.TERMINATED)
    assert deleted.substatus == "TERMINATED"
    with pytest.raises(IllegalTransition, match="not allowed"):
        move_instance(stopped, InstanceStatus.EXECUTING, T0)
