"""A job's own course: settling one that ended (its slot goes to the user's
next waiting job), canceling, and retrying a job that waits in the queue.

Every step re-reads the job and acts only on what the job still is, so a late
or repeated call (a redelivery, a second tick) changes nothing.
"""

from __future__ import annotations

from datetime import datetime

from spotline.functions.deps import Deps
from spotline.functions.ops.placement import launch
from spotline.functions.ops.queue import drop, give_up, wait_for_quota
from spotline.functions.ops.slots import free_job_slot, take_job_slot
from spotline.functions.ops.teardown import Release, release_instances
from spotline.shared import logs
from spotline.shared.domain.admission import refusals
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.documents import JobDoc, QueueEntry
from spotline.shared.domain.errors import IllegalTransition, PermanentError
from spotline.shared.domain.lifecycle import (
    advance,
    current_vms,
    end_attempt,
    job_id_for,
    new_job,
)
from spotline.shared.domain.liveness import Owner
from spotline.shared.domain.queueing import give_up_reason
from spotline.shared.domain.recording import record_for
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from spotline.shared.domain.tenancy import secret_refusals
from spotline.shared.domain.transitions import fail_job


def admit(deps: Deps, spec: JobSpec, message_id: str, now: datetime) -> JobDoc:
    """The submitted job, created; or, for a redelivered submission, as the
    first delivery left it.

    Raises:
        PermanentError: the deployment cannot take the job (``admission``), or
            another submission holds the job id.
    """
    settings = deps.settings
    problems = refusals(spec, load_catalog(), settings.region, settings.webhook_allowed_networks)
    if spec.user in settings.user_topics:
        problems += secret_refusals(spec.env, spec.user, settings.project)
    if problems:
        raise PermanentError("; ".join(problems))
    job_id = job_id_for(spec, message_id)
    job = new_job(spec, job_id, message_id, now)
    job = job.model_copy(
        update={"record": record_for(deps.settings.job_prefix(job_id, spec.user), spec)}
    )
    if deps.store.create_job(job):
        return job
    existing = deps.store.get_job(job_id)
    if existing is None:
        raise RuntimeError(f"job {job_id} exists and vanished; retrying")
    if existing.message_id != message_id:
        raise PermanentError(f"job_id: {job_id!r} is already taken by another submission")
    return existing  # a redelivery: carry on from where the first delivery got


def start(deps: Deps, job: JobDoc, now: datetime) -> JobDoc:
    """Take the job's slot and place it, or queue it for quota. Re-entrant: a
    job past REQUESTING_SERVER is left as it is.

    Every placement of an attempt comes through here (submit_job, recovery,
    the reaper's retries), so none gets a VM past the active-jobs quota: a job
    holding its slot keeps it; one whose submission died before it took one
    takes it now, or waits for quota."""
    if job.substatus != JobSubstatus.REQUESTING_SERVER:
        logs.info(f"job {job.job_id}: already {job.substatus}, nothing to do", job_id=job.job_id)
        return job
    over_quota = take_job_slot(deps, job, now)
    if over_quota is not None:
        return wait_for_quota(deps, job, now, over_quota)
    return place(deps, job, now)


def place(deps: Deps, job: JobDoc, now: datetime) -> JobDoc:
    """Launch the job's attempt; a job that launching FAILED (no option can ever
    succeed) gives up its slot at once."""
    placed = launch(deps, job, now)
    settle(deps, placed, now)
    return placed


def settle(deps: Deps, job: JobDoc | None, now: datetime) -> None:
    """Free the slot of a job that has ended (no-op otherwise)."""
    if job is not None and job.status in JobStatus.terminal():
        release_job(deps, job.user, job.job_id, now)


def release_job(deps: Deps, user: str, job_id: str, now: datetime) -> None:
    """The job ended (or is gone): free its slot, then let the user's oldest
    job waiting for quota try."""
    free_job_slot(deps, user, job_id, now)
    for entry in deps.store.queue_of_user(user):
        if entry.reason == "quota" and entry.job_id != job_id:
            retry_waiting(deps, entry, now)
            return


def cancel(deps: Deps, job_id: str, reason: str, now: datetime) -> JobDoc:
    """CANCELED with the reason, queue entry dropped, VM deleted. Re-entrant:
    canceling a canceled job finishes releasing its VM.

    Raises:
        PermanentError: no such job.
    """
    store = deps.store

    def canceled(job: JobDoc) -> JobDoc:
        if job.status in JobStatus.terminal():
            return job
        try:
            return end_attempt(fail_job(job, JobSubstatus.CANCELED, now, reason), now, "canceled")
        except IllegalTransition:
            return job

    job = store.update_job(job_id, canceled)
    if job is None:
        raise PermanentError(f"no job {job_id} to cancel")
    if job.status != JobStatus.CANCELED:
        logs.info(f"job {job_id}: already {job.status}; cancel ignored", job_id=job_id)
        return job
    store.delete_queue(job_id)
    # Every node of the attempt goes, deleted together: with node 0 alone, a
    # gang's other nodes trained on, and billed, until the reaper let them go.
    # Each is guarded by its holder (the write checks it): not once another
    # job has the VM.
    note = f"job canceled: {reason}"
    releases = [
        Release(instance.name, note, owner=Owner.of(instance))
        for instance in store.get_instances(current_vms(job)).values()
        if instance.job_id == job_id and instance.status in InstanceStatus.live()
    ]
    release_instances(deps, releases, now)
    settle(deps, job, now)
    logs.info(f"job {job_id}: canceled ({reason})", job_id=job_id)
    return job


def retry_waiting(deps: Deps, entry: QueueEntry, now: datetime) -> str:
    """One more try for a job waiting for quota (a job slot, then slots for its
    VMs): placed, still waiting, or CANCELED once ``wait_new_job_create_s`` has
    passed since it began to wait. The queue entry stays until the job has its
    VMs, so a job that gets its job slot but not its instance slots keeps its
    place and its deadline."""
    job = deps.store.get_job(entry.job_id)
    if job is None or job.substatus != JobSubstatus.WAITING_FOR_QUOTA:
        drop(deps, entry.job_id)
        return "queue_dropped"
    reason = take_job_slot(deps, job, now)
    if reason is None:
        moved = deps.store.update_job(
            job.job_id,
            lambda current: advance(current, JobSubstatus.REQUESTING_SERVER, now, "slot free"),
        )
        job = place(deps, moved or job, now)
        if job.status == JobStatus.FAILED:
            return "failed"
        if job.substatus != JobSubstatus.WAITING_FOR_QUOTA:
            return "placed"
        reason = job.history[-1].note  # what launch found over quota
    else:
        job = wait_for_quota(deps, job, now, reason)
    why = give_up_reason(entry, job.spec, now, last_error=reason)
    if why is None:
        return "waiting"
    # It may hold a job slot (it was waiting for instance slots).
    settle(deps, give_up(deps, job.job_id, why, now), now)
    return "gave_up"


def retry_placement(deps: Deps, job: JobDoc, now: datetime) -> JobDoc:
    """One more try for a job waiting for a VM (no capacity, or its next
    attempt's safety net). Whether it should still wait is the caller's
    question (``spotline.shared.domain.queueing.give_up_reason``)."""
    moved = deps.store.update_job(
        job.job_id,
        lambda current: advance(current, JobSubstatus.REQUESTING_SERVER, now, note="retrying"),
    )
    return start(deps, moved or job, now)


def place_again(deps: Deps, job: JobDoc, now: datetime) -> str | None:
    """A job left in REQUESTING_SERVER with no queue entry (the placing
    function died): place it again. None: it moved on, or the queue has it."""
    if deps.store.get_queue(job.job_id) is not None:
        return None
    # Read again: the reaper decided on an older read, and the tick's queue
    # retry (running beside the pages) may have placed the job, or given up
    # on it, since; placing that read would insert a VM for it again.
    current = deps.store.get_job(job.job_id)
    if current is None or (current.substatus, current.attempt) != (job.substatus, job.attempt):
        return None
    placed = start(deps, current, now)
    if placed.status == JobStatus.FAILED:
        return "failed"
    return "waiting" if placed.substatus == JobSubstatus.WAITING_FOR_QUOTA else "replaced"
