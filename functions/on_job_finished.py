"""spotline-job-finished -> on_job_finished: record the outcome, release the VM.

Re-entrant: a redelivery after the job is recorded still makes sure the VM is
deleted and the instance closed.
"""

from __future__ import annotations

from datetime import UTC, datetime

from functions.envelope import Message, pubsub_handler
from functions.quota import settle
from functions.release import release_instance
from functions.vm_events import apply_to_job
from shared import lifecycle, logs
from shared.events import JobFinished


@pubsub_handler
def on_job_finished(message: Message) -> None:
    event = message.parse(JobFinished)
    now = datetime.now(UTC)
    job = apply_to_job(event, lambda current: lifecycle.finished(current, event, now))
    logs.info(
        f"job {job.job_id}: {job.status} (exit code {event.exit_code})",
        job_id=job.job_id,
        status=job.status,
    )
    if job.instance == event.instance:
        release_instance(event.instance, now, note=f"job {job.status.lower()}")
    settle(job, now)
