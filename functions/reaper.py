"""spotline-reaper-tick -> reaper: the sweep Cloud Scheduler starts every minute.

Level-triggered and idempotent (Scheduler may fire twice): it looks at what is
due now and converges. This first version drains the queue of jobs waiting for
capacity and ends those past their ``wait_request_s``; reconciliation with
Compute Engine (missed preemptions, stalls, orphans) comes with spot recovery.
"""

from __future__ import annotations

from datetime import UTC, datetime

from functions import deps
from functions.envelope import Message, pubsub_handler
from functions.launch import launch
from shared import logs
from shared.documents import JobDoc, QueueEntry
from shared.errors import PermanentError
from shared.lifecycle import advance
from shared.states import JobStatus, JobSubstatus
from shared.transitions import fail_job


@pubsub_handler
def reaper(message: Message) -> None:
    now = datetime.now(UTC)
    due = deps.store().due_queue(now)
    for entry in due:
        try:
            _drain(entry, now)
        except PermanentError as err:
            logs.warning(f"reaper: job {entry.job_id}: {err}", job_id=entry.job_id)
    logs.info(f"reaper: swept {len(due)} queued job(s)", queued=len(due))


def _drain(entry: QueueEntry, now: datetime) -> None:
    store = deps.store()
    job = store.get_job(entry.job_id)
    if job is None or job.status in JobStatus.terminal() or job.attempt != entry.attempt:
        store.delete_queue(entry.job_id)
        return
    waited_s = (now - entry.enqueued_at).total_seconds()
    if waited_s > job.spec.wait_request_s:
        reason = (
            f"no capacity within wait_request_s={job.spec.wait_request_s} s; "
            f"tried {entry.tries} time(s), last: {entry.last_error}"
        )
        store.update_job(
            job.job_id, lambda current: fail_job(current, JobSubstatus.CANCELED, now, reason)
        )
        store.delete_queue(entry.job_id)
        return
    job = _requesting(job, now)
    if job.substatus == JobSubstatus.REQUESTING_SERVER:
        launched = launch(job, now)
        if launched.substatus != JobSubstatus.WAITING_FOR_CAPACITY:
            store.delete_queue(entry.job_id)


def _requesting(job: JobDoc, now: datetime) -> JobDoc:
    moved = deps.store().update_job(
        job.job_id,
        lambda current: advance(current, JobSubstatus.REQUESTING_SERVER, now, note="retrying"),
    )
    return moved or job
