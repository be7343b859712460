"""spotline-job-finished -> on_job_finished: record the outcome, release the VM.

Re-entrant: a redelivery after the job is recorded still makes sure the VM is
deleted and the instance closed.
"""

from __future__ import annotations

from functions.deps import Deps
from functions.handlers.envelope import Message, pubsub_handler
from functions.handlers.vm_events import apply_to_job
from functions.ops.jobs import settle
from functions.ops.teardown import retire_instance
from shared import logs
from shared.contract.events import JobFinished
from shared.domain import lifecycle
from shared.domain.cooling import start_cooling


@pubsub_handler
def on_job_finished(message: Message, deps: Deps) -> None:
    event = message.parse(JobFinished)
    now = deps.clock()
    job = apply_to_job(deps, event, lambda current: lifecycle.finished(current, event, now))
    if event.last_epoch is not None:
        deps.store.put_epoch(job.job_id, lifecycle.epoch_doc(event.last_epoch, now))
    logs.info(
        f"job {job.job_id}: {job.status} (exit code {event.exit_code})",
        job_id=job.job_id,
        status=job.status,
    )
    if event.instance in lifecycle.current_vms(job):
        period = job.spec.cool_down_period_s
        if period > 0 and not job.nodes:
            # Kept for the user's next job; the reaper ends it when the period ends.
            deps.store.update_instance(
                event.instance,
                lambda current: start_cooling(current, now, period, deps.settings.cooling_rule),
            )
        else:
            retire_instance(deps, event.instance, now, note=f"job {job.status.lower()}")
    settle(deps, job, now)
