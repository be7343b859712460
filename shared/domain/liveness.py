"""Is a VM alive, and is it wanted, and whose is it: checks of one instance, pure.

The reaper compares what Firestore believes with what Compute Engine lists;
these say what a difference means. Each takes the documents and ``now``.

A VM outlives its job's hold on it: a cooling VM is claimed by the user's next
job, a stopped one restarted for it, under the same name (and, when both are
first attempts, the same attempt number). The instance document's ``job_id``
and ``attempt`` say which job's attempt holds it now; what a job's event does
to an instance is guarded by them (``if_owned``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

from spotline.shared.domain.documents import InstanceDoc, JobDoc
from spotline.shared.domain.lifecycle import current_vms
from spotline.shared.domain.placement import vm_attempt
from spotline.shared.domain.states import InstanceSubstatus, JobStatus, JobSubstatus

# Compute Engine stops a preempted Spot VM 30 s after its preemption notice,
# and the log sink reports the preemption at the notice's start, while the VM
# still saves its state. The margin covers the report's delivery and clocks.
PREEMPTION_NOTICE_S = 30.0
NOTICE_MARGIN_S = 15.0


class Owner(NamedTuple):
    """One attempt of one job: the holder an instance is written on behalf of."""

    job_id: str
    attempt: int

    @classmethod
    def of(cls, doc: InstanceDoc | JobDoc) -> Owner:
        """An instance's holder now, or a job's current attempt."""
        return cls(doc.job_id, doc.attempt)


def belongs_to(instance: InstanceDoc, owner: Owner) -> bool:
    """The instance is still ``owner``'s: no other job (or attempt) took it since."""
    return Owner.of(instance) == owner


def if_owned(
    owner: Owner, change: Callable[[InstanceDoc], InstanceDoc]
) -> Callable[[InstanceDoc], InstanceDoc]:
    """``change``, made only while the instance belongs to ``owner``: otherwise
    the instance as it is. For a guarded update (``Store.update_instance``), so
    the check runs on the document the write replaces, not on an earlier read."""

    def guarded(instance: InstanceDoc) -> InstanceDoc:
        return change(instance) if belongs_to(instance, owner) else instance

    return guarded


def being_placed(job: JobDoc | None, job_id: str, attempt: int) -> bool:
    """The job's attempt ``attempt`` is getting its VMs right now: a VM of it may
    exist before its instance document (written next), and its slot before both."""
    return (
        job is not None
        and job.job_id == job_id
        and job.attempt == attempt
        and job.status in JobStatus.active()
        and job.substatus == JobSubstatus.REQUESTING_SERVER
    )


def being_placed_now(job: JobDoc | None) -> bool:
    """The job is getting VMs right now, whichever attempt: a new VM, a
    cooling one or a stopped one of its user's."""
    return (
        job is not None
        and job.status in JobStatus.active()
        and job.substatus == JobSubstatus.REQUESTING_SERVER
    )


def vm_being_placed(name: str, job: JobDoc | None) -> bool:
    """The VM ``name`` (named for its job and attempt) is being placed."""
    made_for = vm_attempt(name)
    return made_for is not None and being_placed(job, *made_for)


def _current_vm_of(instance: InstanceDoc, job: JobDoc | None) -> bool:
    """The instance is one of the VMs of ``job``'s current attempt, and that
    attempt still holds it."""
    return (
        job is not None
        and belongs_to(instance, Owner.of(job))
        and instance.name in current_vms(job)
    )


def serves_its_job(instance: InstanceDoc, job: JobDoc | None) -> bool:
    """The instance runs its live job's current attempt."""
    return _current_vm_of(instance, job) and job is not None and job.status in JobStatus.active()


def finishing(instance: InstanceDoc, job: JobDoc | None, now: datetime, grace_s: float) -> bool:
    """The instance's job ended on it at most ``grace_s`` ago: the step that
    ended it (``on_job_finished``, a cancel) writes the job first and lets the
    VM go next (cooling, stopped or deleted), so the instance may not show it
    yet. Released under that step's feet, a VM meant to cool is deleted. Past
    the grace, that step has died for good (a redelivery runs well inside it),
    and whatever it left is the reaper's."""
    if job is None or not _current_vm_of(instance, job):
        return False
    if job.status not in JobStatus.terminal() or not job.history:
        return False
    # A terminal job never moves again: its last history line is its end.
    return (now - job.history[-1].at).total_seconds() <= grace_s


def in_preemption_notice(
    name: str, instance: InstanceDoc | None, job: JobDoc | None, now: datetime
) -> bool:
    """The VM ``name`` was reported preempted less than the notice (and its
    margin) ago: it may still be saving its state, so it is not deleted yet.

    Args:
        instance: its instance document, if any: closed PREEMPTED when the
            report was recorded (the VM is kept through the notice).
        job: its job, if any: the lost attempt's record says when, also when
            the report's function died before it closed the instance.
    """
    since = None
    if instance is not None and instance.substatus == InstanceSubstatus.PREEMPTED:
        since = instance.closed_at
    elif job is not None:
        since = _preempted_at(job, name)
    notice_s = PREEMPTION_NOTICE_S + NOTICE_MARGIN_S
    return since is not None and (now - since).total_seconds() < notice_s


def _preempted_at(job: JobDoc, name: str) -> datetime | None:
    """When the job recorded the attempt of VM ``name`` preempted (None: it did not)."""
    made_for = vm_attempt(name)
    if made_for is None or made_for[0] != job.job_id:
        return None
    for record in job.attempts:
        if record.attempt == made_for[1] and record.outcome == "preempted":
            return record.ended_at
    return None


def silent_s(instance: InstanceDoc, now: datetime) -> float:
    """Seconds since the VM last gave a sign of life, or since its job got it,
    whichever is later.

    Its job got it when it was made, or when its running segment began: a
    claimed cooling VM and a restarted stopped one start a segment then. The
    heartbeats of the job it served before say nothing of this one: counted
    from them, a VM claimed after cooling past the stall timeout would stall
    at the next sweep.
    """
    got = instance.segment_started_at or instance.created_at
    heard = instance.last_heartbeat_at or instance.booted_at
    return (now - max(got, heard) if heard else now - got).total_seconds()


def stall_note(
    instance: InstanceDoc, now: datetime, stall_timeout_s: float, boot_timeout_s: float
) -> str | None:
    """Why the VM counts as stalled (a booted VM silent for ``stall_timeout_s``,
    or one not booted after ``boot_timeout_s``); None while it is not."""
    silent = silent_s(instance, now)
    booted = instance.booted_at is not None
    if silent <= (stall_timeout_s if booted else boot_timeout_s):
        return None
    what = "no heartbeat" if booted else "not booted"
    return f"{instance.name}: {what} for {silent:.0f} s"


def missed_preemption_note(instance: InstanceDoc) -> str:
    return f"{instance.name} vanished without a notice (missed preemption)"
