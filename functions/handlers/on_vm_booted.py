"""spotline-vm-booted -> on_vm_booted: the agent is up; the job gears up."""

from __future__ import annotations

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message, pubsub_handler
from spotline.functions.handlers.vm_events import apply_to_job, arrival
from spotline.functions.ops.node_replacement import replacement_booted
from spotline.shared.contract.events import VmBooted
from spotline.shared.domain import lifecycle, pending_nodes
from spotline.shared.domain.liveness import Owner, if_owned


@pubsub_handler
def on_vm_booted(message: Message, deps: Deps) -> None:
    event = message.parse(VmBooted)
    now = deps.clock()
    store = deps.store
    via = arrival(deps, "vm_booted", message.source)
    job = apply_to_job(deps, via, event, lambda current: lifecycle.booted(current, event, now))
    # Not once the VM is another job's (claimed, restarted): a late boot of
    # this job's agent says nothing of that one.
    store.update_instance(
        event.instance,
        if_owned(
            Owner(event.job_id, event.attempt),
            lambda instance: lifecycle.instance_seen(
                instance, now, booted=True, instance_id=event.instance_id
            ),
        ),
    )
    if event.instance in pending_nodes.replacements(job):
        # A gang's lost node's replacement is up: the gang regroups when it can.
        replacement_booted(deps, job.job_id, event.instance, event.attempt)
