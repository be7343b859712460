"""spotline-vm-booted -> on_vm_booted: the agent is up; the job gears up."""

from __future__ import annotations

from datetime import UTC, datetime

from functions import deps
from functions.envelope import Message, pubsub_handler
from functions.vm_events import apply_to_job
from shared import lifecycle
from shared.events import VmBooted


@pubsub_handler
def on_vm_booted(message: Message) -> None:
    event = message.parse(VmBooted)
    now = datetime.now(UTC)
    store = deps.store()
    apply_to_job(event, lambda current: lifecycle.booted(current, event, now))
    store.update_instance(
        event.instance,
        lambda instance: lifecycle.instance_seen(
            instance, now, booted=True, instance_id=event.instance_id
        ),
    )
