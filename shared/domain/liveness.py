"""Is a VM alive, and is it wanted: the reaper's checks of one instance, pure.

The reaper compares what Firestore believes with what Compute Engine lists;
these say what a difference means. Each takes the documents and ``now``.
"""

from __future__ import annotations

from datetime import datetime

from shared.domain.documents import InstanceDoc, JobDoc
from shared.domain.lifecycle import current_vms
from shared.domain.placement import vm_attempt
from shared.domain.states import InstanceSubstatus, JobStatus, JobSubstatus

# Compute Engine stops a preempted Spot VM 30 s after its preemption notice,
# and the log sink reports the preemption at the notice's start, while the VM
# still saves its state. The margin covers the report's delivery and clocks.
PREEMPTION_NOTICE_S = 30.0
NOTICE_MARGIN_S = 15.0


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


def vm_being_placed(name: str, job: JobDoc | None) -> bool:
    """The VM ``name`` (named for its job and attempt) is being placed."""
    made_for = vm_attempt(name)
    return made_for is not None and being_placed(job, *made_for)


def _current_vm_of(instance: InstanceDoc, job: JobDoc | None) -> bool:
    """The instance is one of the VMs of its job's current attempt."""
    return job is not None and job.attempt == instance.attempt and instance.name in current_vms(job)


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
    """Seconds since the VM last gave a sign of life (or was made)."""
    # A restarted (stopped) VM's running segment began when it was restarted.
    last = (
        instance.last_heartbeat_at
        or instance.booted_at
        or instance.segment_started_at
        or instance.created_at
    )
    return (now - last).total_seconds()


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
