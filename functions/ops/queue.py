"""The queue of jobs that cannot have a VM now (``spotline.shared.domain.queueing``):
no capacity anywhere they may run, or over the user's quota.

The queue entry is written before the job document says why, so the reaper
retries the job even if this process dies in between.
"""

from __future__ import annotations

from datetime import datetime

from spotline.functions.deps import Deps
from spotline.shared import logs
from spotline.shared.domain import queueing
from spotline.shared.domain.documents import JobDoc, QueueReason
from spotline.shared.domain.lifecycle import advance
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.transitions import fail_job


def wait_for_quota(deps: Deps, job: JobDoc, now: datetime, reason: str) -> JobDoc:
    """WAITING_FOR_QUOTA, retried every ``wait_new_job_create_interval``
    (``spotline.functions.ops.jobs.retry_waiting``), and at once when a job of the user ends."""
    store = deps.store
    store.put_queue(queueing.waiting_for_quota(job, store.get_queue(job.job_id), now, reason))
    moved = store.update_job(
        job.job_id,
        lambda current: advance(current, JobSubstatus.WAITING_FOR_QUOTA, now, note=reason),
    )
    return moved or job


def wait_for_capacity(deps: Deps, job: JobDoc, now: datetime, tried: list[str]) -> JobDoc:
    """WAITING_FOR_CAPACITY, retried with exponential backoff by the reaper,
    each machine option for ``wait_request_s`` in turn, until ``wait_total_s``
    (``spotline.shared.domain.option_waiting``); ``tried`` says what failed, for the person."""
    store = deps.store
    summary = "; ".join(tried) or "no option"
    entry = queueing.waiting_for_capacity(job, store.get_queue(job.job_id), now, summary)
    store.put_queue(entry)
    delay_s = (entry.not_before - now).total_seconds()
    logs.warning(f"job {job.job_id}: no capacity ({summary}); retry in {delay_s:.0f} s")
    recorded = store.update_job(
        job.job_id,
        lambda current: advance(
            current, JobSubstatus.WAITING_FOR_CAPACITY, now, note=f"no capacity: {summary}"
        ),
    )
    return recorded or job


def queue_next_attempt(deps: Deps, job: JobDoc, reason: QueueReason, now: datetime) -> None:
    """Before an attempt is placed at once: if this process dies, the reaper places it."""
    deps.store.put_queue(queueing.next_attempt(job, reason, now))


def give_up(deps: Deps, job_id: str, reason: str, now: datetime) -> JobDoc | None:
    """CANCELED with the reason, out of the queue. The caller settles the job."""
    ended = deps.store.update_job(
        job_id, lambda current: fail_job(current, JobSubstatus.CANCELED, now, reason)
    )
    deps.store.delete_queue(job_id)
    logs.warning(f"job {job_id}: {reason}", job_id=job_id)
    return ended


def fail_unplaceable(deps: Deps, job_id: str, reason: str, now: datetime) -> JobDoc | None:
    """FAILED: no VM request of the job can ever succeed (``Unplaceable``), so
    it neither waits nor is retried; out of the queue. A job that ended or got
    its VMs meanwhile is left as it is. The caller settles the job."""
    error = f"cannot be placed: {reason}"

    def failed(current: JobDoc) -> JobDoc:
        if current.substatus in {*JobSubstatus.endings(), *JobSubstatus.on_vm()}:
            return current
        return fail_job(current, JobSubstatus.FAILED, now, error)

    ended = deps.store.update_job(job_id, failed)
    deps.store.delete_queue(job_id)
    logs.warning(f"job {job_id}: {error}", job_id=job_id)
    return ended


def drop(deps: Deps, job_id: str) -> None:
    """The entry is stale (the job ended, moved on, or was placed meanwhile)."""
    deps.store.delete_queue(job_id)
