"""Holding and freeing a user's job slots, and the jobs that wait for one.

A job takes a slot before its first VM is requested and frees it when it ends;
over quota it waits in WAITING_FOR_QUOTA for up to ``wait_new_job_create_s``
(non-positive: for ever), retried every ``wait_new_job_create_interval`` by
the reaper, and at once when another job of the user ends.
"""

from __future__ import annotations

from datetime import datetime

from functions.deps import Deps
from functions.ops.launch import launch
from functions.ops.waiting import wait_for_quota
from shared import logs
from shared.domain.documents import JobDoc, QueueEntry
from shared.domain.lifecycle import advance
from shared.domain.quotas import free_slot, holds, over_quota_reason, take_slot
from shared.domain.states import JobStatus, JobSubstatus
from shared.domain.transitions import fail_job


def take_job_slot(deps: Deps, job: JobDoc, now: datetime) -> str | None:
    """None when the job holds a slot (now or already); else why not."""
    limit = deps.settings.max_active_jobs
    user = deps.store.update_user(
        job.user, lambda current: take_slot(current, "active_jobs", job.job_id, limit, now)
    )
    if holds(user, "active_jobs", job.job_id):
        return None
    return over_quota_reason(user, "active_jobs", limit)


def release_job(deps: Deps, user: str, job_id: str, now: datetime) -> None:
    """The job ended: free its slot, then let the user's oldest waiting job try."""
    deps.store.update_user(user, lambda current: free_slot(current, "active_jobs", job_id, now))
    for entry in deps.store.queue_of_user(user):
        if entry.reason == "quota" and entry.job_id != job_id:
            retry_waiting(deps, entry, now)
            return


def retry_waiting(deps: Deps, entry: QueueEntry, now: datetime) -> str:
    """One more try for a job waiting for quota (a job slot, then slots for its
    VMs): placed, still waiting, or CANCELED once ``wait_new_job_create_s`` has
    passed since it began to wait. The queue entry stays until the job has its
    VMs, so a job that gets its job slot but not its instance slots keeps its
    place and its deadline."""
    store = deps.store
    job = store.get_job(entry.job_id)
    if job is None or job.substatus != JobSubstatus.WAITING_FOR_QUOTA:
        store.delete_queue(entry.job_id)
        return "queue_dropped"
    reason = take_job_slot(deps, job, now)
    if reason is None:
        moved = store.update_job(
            job.job_id,
            lambda current: advance(current, JobSubstatus.REQUESTING_SERVER, now, "slot free"),
        )
        job = launch(deps, moved or job, now)
        if job.substatus != JobSubstatus.WAITING_FOR_QUOTA:
            return "placed"
        reason = job.history[-1].note  # what launch found over quota
    else:
        job = wait_for_quota(deps, job, now, reason)
    limit_s = job.spec.wait_new_job_create_s
    waited_s = (now - entry.enqueued_at).total_seconds()
    if limit_s > 0 and waited_s > limit_s:
        message = f"over quota for wait_new_job_create_s={limit_s} s: {reason}"
        ended = store.update_job(
            job.job_id, lambda current: fail_job(current, JobSubstatus.CANCELED, now, message)
        )
        store.delete_queue(entry.job_id)
        logs.warning(f"job {job.job_id}: {message}", job_id=job.job_id)
        settle(deps, ended, now)  # it may hold a job slot (it was waiting for instance slots)
        return "gave_up"
    return "waiting"


def settle(deps: Deps, job: JobDoc | None, now: datetime) -> None:
    """Free the slot of a job that has ended (no-op otherwise)."""
    if job is not None and job.status in JobStatus.terminal():
        release_job(deps, job.user, job.job_id, now)
