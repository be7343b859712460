"""Waiting in the queue: the entries, the retry backoff and the give-up rule.

A job waits for capacity (retried with exponential backoff, one machine
option after another, ``spotline.shared.domain.option_waiting``) or for quota
(retried every ``wait_new_job_create_interval`` until
``wait_new_job_create_s``; non-positive: for ever). Pure: the store
writes the entries, the reaper asks ``give_up_reason`` before each retry.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from spotline.shared.domain import option_waiting
from spotline.shared.domain.documents import JobDoc, QueueEntry, QueueReason
from spotline.shared.domain.spec import JobSpec

BACKOFF_BASE_S = 15
BACKOFF_MAX_S = 300


def capacity_backoff_s(tries: int) -> int:
    """Seconds before the ``tries``-th retry of a job no zone had room for."""
    return int(min(BACKOFF_BASE_S * 2 ** (max(tries, 1) - 1), BACKOFF_MAX_S))


def waiting_for_capacity(
    job: JobDoc, previous: QueueEntry | None, now: datetime, summary: str
) -> QueueEntry:
    """The entry of a job that found no capacity; ``previous`` keeps its start,
    its count of tries and, for the same attempt, when it began to wait for
    capacity (the options' windows and the deadline count from there). The
    retry is due at the backoff, or sooner where the current option's window
    or the whole wait ends."""
    tries = previous.tries + 1 if previous else 1
    since = waiting_since(previous, job.attempt) or now
    backoff_s: float = capacity_backoff_s(tries)
    in_window_s = option_waiting.window_elapsed_s(since, now, job.spec.wait_request_s)
    if in_window_s is not None:  # 15 s, 30 s, 60 s... again from each window's start
        backoff_s = min(backoff_s, in_window_s + BACKOFF_BASE_S)
    due = [now + timedelta(seconds=backoff_s)]
    end = option_waiting.window_end(since, now, job.spec.wait_request_s)
    limit_s = option_waiting.total_wait_s(job.spec)
    due += [end] if end is not None else []
    due += [since + timedelta(seconds=limit_s)] if limit_s is not None else []
    return QueueEntry(
        job_id=job.job_id,
        reason="no-capacity",
        attempt=job.attempt,
        not_before=max(min(due), now),
        enqueued_at=previous.enqueued_at if previous else now,
        tries=tries,
        last_error=summary,
        waiting_since=since,
    )


def waiting_since(entry: QueueEntry | None, attempt: int) -> datetime | None:
    """When the attempt began to wait for capacity; None before it has (a new
    attempt, or a wait for quota alone, starts no option window)."""
    if entry is None or entry.attempt != attempt:
        return None
    return entry.waiting_since


def waiting_for_quota(
    job: JobDoc, previous: QueueEntry | None, now: datetime, reason: str
) -> QueueEntry:
    """The entry of a job over its user's quota, retried at a fixed interval.
    A wait for capacity of the same attempt before it is kept (``waiting_since``):
    a quota wait in between must not start that wait, and its deadline, again."""
    return QueueEntry(
        job_id=job.job_id,
        reason="quota",
        attempt=job.attempt,
        not_before=now + timedelta(seconds=job.spec.wait_new_job_create_interval),
        enqueued_at=previous.enqueued_at if previous else now,
        tries=previous.tries + 1 if previous else 1,
        last_error=reason,
        user=job.user,
        waiting_since=waiting_since(previous, job.attempt),
    )


def next_attempt(job: JobDoc, reason: QueueReason, now: datetime) -> QueueEntry:
    """The safety net of an attempt placed at once: due now, for the reaper."""
    return QueueEntry(
        job_id=job.job_id, reason=reason, attempt=job.attempt, not_before=now, enqueued_at=now
    )


def give_up_reason(
    entry: QueueEntry, spec: JobSpec, now: datetime, last_error: str | None = None
) -> str | None:
    """Why the job stops waiting (it is CANCELED with this), or None while it
    may wait on. ``last_error``: what the latest try found, when newer than
    the entry's."""
    waited_s = (now - entry.enqueued_at).total_seconds()
    error = last_error if last_error is not None else entry.last_error
    if entry.reason == "quota":
        limit_s = spec.wait_new_job_create_s
        if limit_s > 0 and waited_s > limit_s:
            return f"over quota for wait_new_job_create_s={limit_s} s: {error}"
        return None
    since = entry.waiting_since or entry.enqueued_at
    return option_waiting.capacity_give_up(spec, (now - since).total_seconds(), entry.tries, error)
