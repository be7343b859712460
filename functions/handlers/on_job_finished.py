"""spotline-job-finished -> on_job_finished: record the outcome, let the VM go.

A non-zero exit the failure policy restarts (``spotline.shared.domain.failure_policy``)
lets the attempt's VMs go and places the next attempt, as a preemption does.

A gang node's non-zero exit is held for the notice window first: another
node's preemption may explain it (``spotline.shared.domain.gang_finish``).

A finish that comes after its VM's loss was recorded (the finish-vs-preempt
race) may still complete the job on that attempt: ``spotline.shared.domain.late_finish``
decides, and the attempt started meanwhile is let go.

Re-entrant: a redelivery after the job is recorded still makes sure the VM is
let go (cooling, stopped or deleted) and the job's slot freed.
"""

from __future__ import annotations

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message, pubsub_handler
from spotline.functions.handlers.vm_events import apply_to_job, arrival
from spotline.functions.ops.jobs import settle
from spotline.functions.ops.node_replacement import relaunch_gang
from spotline.functions.ops.recovery import release_superseded, restart
from spotline.functions.ops.teardown import after_job
from spotline.shared import logs
from spotline.shared.contract.events import JobFinished
from spotline.shared.domain import (
    failure_policy,
    late_finish,
    lifecycle,
    node_replacement,
    nothing_saved,
)


@pubsub_handler
def on_job_finished(message: Message, deps: Deps) -> None:
    event = message.parse(JobFinished)
    now = deps.clock()
    job = apply_to_job(
        deps,
        arrival(deps, "job_finished", message.source),
        event,
        lambda current: nothing_saved.after_finish(
            late_finish.job_finished(current, event, now), event
        ),
    )
    if event.last_epoch is not None and lifecycle.within_epochs(job, event.last_epoch):
        deps.store.put_epoch(job.job_id, lifecycle.epoch_doc(event.last_epoch, now))
    logs.info(
        f"job {job.job_id}: {job.status} (exit code {event.exit_code})",
        job_id=job.job_id,
        status=job.status,
    )
    held = job.held_finish
    if held is not None and held.event.attempt == event.attempt:
        # Another node's preemption may explain it: the gang keeps its VMs till
        # that comes, or the reaper judges the finish (``gang_finish``).
        return
    if node_replacement.relaunched_after(job, event.attempt):
        # A node exited while its gang waited for a replacement: the whole gang goes.
        relaunch_gang(deps, job, event.attempt, now)
    elif failure_policy.restarted_after(job, event.attempt):
        # The failure policy restarts it: the errored attempt's VMs go, a new one comes.
        restart(deps, job, event.attempt, now)
    elif late_finish.ended_after_loss(job):
        # Its VM was lost: nothing to cool or stop; the next attempt's VMs go.
        release_superseded(deps, job, now)
    elif event.instance in lifecycle.current_vms(job):
        after_job(deps, job, event.instance, now)
    settle(deps, job, now)
