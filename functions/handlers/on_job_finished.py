"""spotline-job-finished -> on_job_finished: record the outcome, let the VM go.

A finish that comes after its VM's loss was recorded (the finish-vs-preempt
race) may still complete the job on that attempt: ``shared.domain.late_finish``
decides, and the attempt started meanwhile is let go.

Re-entrant: a redelivery after the job is recorded still makes sure the VM is
let go (cooling, stopped or deleted) and the job's slot freed.
"""

from __future__ import annotations

from functions.deps import Deps
from functions.handlers.envelope import Message, pubsub_handler
from functions.handlers.vm_events import apply_to_job
from functions.ops.jobs import settle
from functions.ops.recovery import release_superseded
from functions.ops.teardown import after_job
from shared import logs
from shared.contract.events import JobFinished
from shared.domain import late_finish, lifecycle


@pubsub_handler
def on_job_finished(message: Message, deps: Deps) -> None:
    event = message.parse(JobFinished)
    now = deps.clock()
    job = apply_to_job(deps, event, lambda current: late_finish.job_finished(current, event, now))
    if event.last_epoch is not None and lifecycle.within_epochs(job, event.last_epoch):
        deps.store.put_epoch(job.job_id, lifecycle.epoch_doc(event.last_epoch, now))
    logs.info(
        f"job {job.job_id}: {job.status} (exit code {event.exit_code})",
        job_id=job.job_id,
        status=job.status,
    )
    if late_finish.ended_after_loss(job):
        # Its VM was lost: nothing to cool or stop; the next attempt's VMs go.
        release_superseded(deps, job, now)
    elif event.instance in lifecycle.current_vms(job):
        after_job(deps, job, event.instance, now)
    settle(deps, job, now)
