"""spotline-cancel -> cancel_job: a person stops a job; its VM is deleted."""

from __future__ import annotations

from datetime import datetime

from functions.deps import Deps
from functions.handlers.envelope import Message, pubsub_handler
from functions.ops.quota import settle
from functions.ops.release import release_instance
from shared import logs
from shared.contract.events import CancelRequest
from shared.domain.documents import JobDoc
from shared.domain.errors import IllegalTransition, PermanentError
from shared.domain.lifecycle import end_attempt
from shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from shared.domain.transitions import fail_job


@pubsub_handler
def cancel_job(message: Message, deps: Deps) -> None:
    request = message.parse(CancelRequest)
    cancel(deps, request.job_id, request.reason, deps.clock())


def cancel(deps: Deps, job_id: str, reason: str, now: datetime) -> JobDoc:
    """CANCELED with the reason, queue entry dropped, VM deleted. Re-entrant:
    canceling a canceled job finishes releasing its VM."""
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
    if job.instance:
        instance = store.get_instance(job.instance)
        if instance is not None and instance.status in InstanceStatus.live():
            release_instance(deps, job.instance, now, note=f"job canceled: {reason}")
    settle(deps, job, now)
    logs.info(f"job {job_id}: canceled ({reason})", job_id=job_id)
    return job
