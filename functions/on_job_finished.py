"""spotline-job-finished -> on_job_finished: record the outcome, release the VM.

Re-entrant: a redelivery after the job is recorded still makes sure the VM is
deleted and the instance closed.
"""

from __future__ import annotations

from datetime import UTC, datetime

from functions import deps
from functions.envelope import Message, pubsub_handler
from functions.release import release_instance
from shared import lifecycle, logs
from shared.errors import PermanentError
from shared.events import JobFinished


@pubsub_handler
def on_job_finished(message: Message) -> None:
    event = message.parse(JobFinished)
    now = datetime.now(UTC)
    store = deps.store()
    job = store.update_job(event.job_id, lambda current: lifecycle.finished(current, event, now))
    if job is None:
        raise PermanentError(f"{event.instance} finished unknown job {event.job_id}")
    logs.info(
        f"job {job.job_id}: {job.status} (exit code {event.exit_code})",
        job_id=job.job_id,
        status=job.status,
    )
    if job.instance == event.instance:
        release_instance(event.instance, now, note=f"job {job.status.lower()}")
