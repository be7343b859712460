"""The one choke point for state changes: checks the table, stamps, records.

Every change of a job's or an instance's state goes through ``move_job`` or
``move_instance``: they refuse a move the table does not allow, stamp the time
and append a line to ``history``. Moving to the state a document is already in
changes nothing, so a redelivered event is harmless.
"""

from __future__ import annotations

from datetime import datetime

from spotline.shared.domain.documents import HistoryEntry, InstanceDoc, JobDoc
from spotline.shared.domain.errors import IllegalTransition
from spotline.shared.domain.job_events import with_event
from spotline.shared.domain.states import (
    INSTANCE_SUBSTATUSES,
    INSTANCE_TRANSITIONS,
    JOB_REVISIONS,
    JOB_TRANSITIONS,
    REOPENABLE,
    InstanceStatus,
    InstanceSubstatus,
    JobSubstatus,
    job_status_for,
)
from spotline.shared.domain.timeline import phase_seconds


def move_job(job: JobDoc, to: JobSubstatus, now: datetime, note: str = "") -> JobDoc:
    """The job after moving to substatus ``to`` (status derived), or unchanged.

    Raises:
        IllegalTransition: the table does not allow the move (a terminal job
            never moves again; a late event cannot move a job backwards).
    """
    if to == job.substatus:
        return job
    if to not in JOB_TRANSITIONS[job.substatus]:
        raise IllegalTransition(
            f"job {job.job_id}: {job.status}/{job.substatus} -> {to} is not allowed"
        )
    return _moved(job, to, now, note)


def note_job(job: JobDoc, now: datetime, note: str) -> JobDoc:
    """The job with a line in its history, and its event, for what happened
    to it without a move (a gang waiting for its replacement lost another
    node): stamped, recorded and notified as a move is, in the state it is in.
    Unlike a move to that state it always adds the line: the caller writes
    it in the same change as what it notes, which a redelivery finds done."""
    return _moved(job, job.substatus, now, note)


def revise_ending(job: JobDoc, to: JobSubstatus, now: datetime, note: str) -> JobDoc:
    """An ended job moved to another ending, as ``JOB_REVISIONS`` allows (a
    FAILED job whose attempt turns out to have completed): stamped, recorded
    and notified like any move; the error it ended with is dropped.

    Raises:
        IllegalTransition: the table does not allow it.
    """
    if to not in JOB_REVISIONS.get(job.substatus, frozenset()):
        raise IllegalTransition(
            f"job {job.job_id}: {job.status}/{job.substatus} -> {to} is not a revision allowed"
        )
    return _moved(job.model_copy(update={"error": None}), to, now, note)


def _moved(job: JobDoc, to: JobSubstatus, now: datetime, note: str) -> JobDoc:
    """The move applied: status derived, time stamped, history appended."""
    status = job_status_for(to, job.attempt)
    entry = HistoryEntry(at=now, status=status, substatus=to, attempt=job.attempt, note=note)
    history = [*job.history, entry]
    moved = job.model_copy(
        update={
            "status": status,
            "substatus": to,
            "updated_at": now,
            "history": history,
            "phase_seconds": phase_seconds(history),
        }
    )
    # The notification goes out in the same write (the job's outbox).
    return with_event(moved, job, now, note)


def fail_job(job: JobDoc, to: JobSubstatus, now: datetime, error: str) -> JobDoc:
    """Move to an ending (FAILED or CANCELED) and say why, in a sentence."""
    moved = move_job(job, to, now, note=error)
    if moved is job:
        return job
    event = moved.pending_events[-1].model_copy(update={"error": error})
    return moved.model_copy(
        update={"error": error, "pending_events": [*moved.pending_events[:-1], event]}
    )


def next_attempt(
    job: JobDoc,
    cause: JobSubstatus,
    now: datetime,
    note: str,
    max_attempts: int,
    give_up: str | None = None,
) -> JobDoc:
    """The attempt ended (PREEMPTED, STALLED, or ERRORED and restarted by the
    failure policy): record it, then start the next attempt in
    REQUESTING_SERVER, or FAIL once ``max_attempts`` VMs were tried, or with
    ``give_up`` (a limit of the failure policy, named). Both moves land in one
    write, so no reader sees a job half-way."""
    lost = move_job(job, cause, now, note)
    lost = lost.model_copy(
        update={"preemptions": job.preemptions + (cause == JobSubstatus.PREEMPTED)}
    )
    if give_up is None and job.attempt >= max_attempts:
        give_up = (
            f"gave up after {job.attempt} attempt(s) (max_attempts={max_attempts}); "
            f"the last one was {cause.lower()}: {note}"
        )
    if give_up is not None:
        return fail_job(lost, JobSubstatus.FAILED, now, give_up)
    bumped = lost.model_copy(
        update={
            "attempt": job.attempt + 1,
            "instance": None,
            "nodes": [],
            "zone": None,
            "machine_id": None,
            "replacing": None,
            "gang_generation": 0,
            "gang_stops": [],
            "gang_stepped": False,
            "telling": None,
        }
    )
    return move_job(bumped, JobSubstatus.REQUESTING_SERVER, now, note=f"attempt {job.attempt + 1}")


def move_instance(
    instance: InstanceDoc,
    to: InstanceStatus,
    now: datetime,
    substatus: InstanceSubstatus | None = None,
    note: str = "",
) -> InstanceDoc:
    """The instance after the move, or unchanged when already there.

    Raises:
        IllegalTransition: the table does not allow the move, or the substatus
            does not belong to the status.
    """
    if substatus not in INSTANCE_SUBSTATUSES[to]:
        raise IllegalTransition(f"instance {instance.name}: {to} cannot carry {substatus}")
    if (to, substatus) == (instance.status, instance.substatus):
        return instance
    if instance.status == InstanceStatus.CLOSED and instance.substatus not in REOPENABLE:
        raise IllegalTransition(
            f"instance {instance.name}: {instance.status}/{instance.substatus} never moves again"
        )
    if to != instance.status and to not in INSTANCE_TRANSITIONS[instance.status]:
        raise IllegalTransition(
            f"instance {instance.name}: {instance.status}/{instance.substatus} -> {to} "
            "is not allowed"
        )
    entry = HistoryEntry(at=now, status=to, substatus=substatus, note=note)
    update: dict[str, object] = {
        "status": to,
        "substatus": substatus,
        "updated_at": now,
        "history": [*instance.history, entry],
    }
    if to == InstanceStatus.CLOSED:
        update["closed_at"] = now
    return instance.model_copy(update=update)
