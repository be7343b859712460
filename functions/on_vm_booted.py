"""spotline-vm-booted -> on_vm_booted: the agent is up; the job gears up."""

from __future__ import annotations

from datetime import UTC, datetime

from functions import deps
from functions.envelope import Message, pubsub_handler
from shared import lifecycle
from shared.errors import PermanentError
from shared.events import VmBooted


@pubsub_handler
def on_vm_booted(message: Message) -> None:
    event = message.parse(VmBooted)
    now = datetime.now(UTC)
    store = deps.store()
    job = store.update_job(event.job_id, lambda current: lifecycle.booted(current, event, now))
    if job is None:
        raise PermanentError(f"{event.instance} booted for unknown job {event.job_id}")
    store.update_instance(
        event.instance,
        lambda instance: lifecycle.instance_seen(
            instance, now, booted=True, instance_id=event.instance_id
        ),
    )
