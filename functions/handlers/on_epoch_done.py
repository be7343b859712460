"""spotline-epoch-done -> on_epoch_done: epochs and heartbeats from the VM."""

from __future__ import annotations

from pydantic import ValidationError

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message, pubsub_handler
from spotline.functions.handlers.vm_events import apply_to_job, arrival
from spotline.functions.ops.node_replacement import replacement_booted
from spotline.shared.contract.events import EpochDone, progress_adapter
from spotline.shared.domain import late_epochs, lifecycle, node_replacement, pending_nodes
from spotline.shared.domain.documents import InstanceDoc
from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.liveness import Owner, if_owned
from spotline.shared.domain.spec import describe_validation_error
from spotline.shared.domain.states import JobSubstatus


@pubsub_handler
def on_epoch_done(message: Message, deps: Deps) -> None:
    try:
        event = progress_adapter.validate_json(message.data)
    except ValidationError as err:
        raise InvalidMessage(describe_validation_error(err)) from err
    now = deps.clock()
    via = arrival(deps, "epoch_done", message.source)
    store = deps.store
    if isinstance(event, EpochDone):
        epoch = event
        job = apply_to_job(
            deps,
            via,
            epoch,
            # The gang stepped; a node lost as it set up being replaced: it was training.
            lambda current: node_replacement.epoch_heard(
                late_epochs.epoch_done(current, epoch, now), epoch.instance, epoch.step
            ),
        )
        if late_epochs.former_node(job, epoch.instance, epoch.attempt):
            # A replaced node's late report: its epoch kept in the history
            # unless the gang recorded it since; its VM is not seen alive.
            if not _recorded(deps, epoch):
                store.put_epoch(epoch.job_id, lifecycle.epoch_doc(epoch, now))
            return
        store.put_epoch(epoch.job_id, lifecycle.epoch_doc(epoch, now))
        training = True
    else:
        beat = event
        job = apply_to_job(deps, via, beat, lambda current: lifecycle.heartbeat(current, beat, now))
        training = beat.phase in (JobSubstatus.TRAINING, JobSubstatus.RETURNING)
        if beat.instance in pending_nodes.replacements(job):
            # Its boot's report may be lost (the agent goes on): a beat says it is up.
            replacement_booted(deps, job.job_id, beat.instance, beat.attempt)

    def seen(instance: InstanceDoc) -> InstanceDoc:
        alive = lifecycle.instance_seen(instance, now)
        return lifecycle.instance_executing(alive, now) if training else alive

    # Not once the VM is another job's (claimed, restarted): a late report of
    # this job's agent must not make that job's VM look alive or training.
    store.update_instance(event.instance, if_owned(Owner(event.job_id, event.attempt), seen))


def _recorded(deps: Deps, epoch: EpochDone) -> bool:
    """Whether the job's history holds ``epoch``'s epoch of its attempt."""
    return any(
        (e.attempt, e.epoch) == (epoch.attempt, epoch.epoch)
        for e in deps.store.list_epochs(epoch.job_id)
    )
