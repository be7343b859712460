"""Queueing a job that cannot have a VM now: no capacity anywhere it may run,
or over the user's quota. The queue entry is written first, so the reaper
retries the job even if this process dies before the job document says why.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from functions.deps import Deps
from shared import logs
from shared.domain.documents import JobDoc, QueueEntry
from shared.domain.lifecycle import advance
from shared.domain.states import JobSubstatus

_BACKOFF_BASE_S = 15
_BACKOFF_MAX_S = 300


def wait_for_quota(deps: Deps, job: JobDoc, now: datetime, reason: str) -> JobDoc:
    """WAITING_FOR_QUOTA, retried every ``wait_new_job_create_interval``
    (``functions.ops.quota.retry_waiting``), and at once when a job of the user ends."""
    store = deps.store
    previous = store.get_queue(job.job_id)
    store.put_queue(
        QueueEntry(
            job_id=job.job_id,
            reason="quota",
            attempt=job.attempt,
            not_before=now + timedelta(seconds=job.spec.wait_new_job_create_interval),
            enqueued_at=previous.enqueued_at if previous else now,
            tries=previous.tries + 1 if previous else 1,
            last_error=reason,
            user=job.user,
        )
    )
    moved = store.update_job(
        job.job_id,
        lambda current: advance(current, JobSubstatus.WAITING_FOR_QUOTA, now, note=reason),
    )
    return moved or job


def wait_for_capacity(deps: Deps, job: JobDoc, now: datetime, tried: list[str]) -> JobDoc:
    """WAITING_FOR_CAPACITY, retried with exponential backoff by the reaper
    until ``wait_request_s``; ``tried`` says what failed, for the person."""
    store = deps.store
    previous = store.get_queue(job.job_id)
    tries = previous.tries + 1 if previous else 1
    delay = min(_BACKOFF_BASE_S * 2 ** (tries - 1), _BACKOFF_MAX_S)
    summary = "; ".join(tried) or "no option"
    store.put_queue(
        QueueEntry(
            job_id=job.job_id,
            reason="no-capacity",
            attempt=job.attempt,
            not_before=now + timedelta(seconds=delay),
            enqueued_at=previous.enqueued_at if previous else now,
            tries=tries,
            last_error=summary,
        )
    )
    logs.warning(f"job {job.job_id}: no capacity ({summary}); retry in {delay} s")
    recorded = store.update_job(
        job.job_id,
        lambda current: advance(
            current, JobSubstatus.WAITING_FOR_CAPACITY, now, note=f"no capacity: {summary}"
        ),
    )
    return recorded or job
