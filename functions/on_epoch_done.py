"""spotline-epoch-done -> on_epoch_done: epochs and heartbeats from the VM."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import ValidationError

from functions import deps
from functions.envelope import Message, pubsub_handler
from shared import lifecycle
from shared.documents import InstanceDoc
from shared.errors import InvalidMessage, PermanentError
from shared.events import EpochDone, Heartbeat, progress_adapter
from shared.spec import describe_validation_error
from shared.states import JobSubstatus


@pubsub_handler
def on_epoch_done(message: Message) -> None:
    try:
        event = progress_adapter.validate_json(message.data)
    except ValidationError as err:
        raise InvalidMessage(describe_validation_error(err)) from err
    now = datetime.now(UTC)
    store = deps.store()
    if isinstance(event, EpochDone):
        job = store.update_job(
            event.job_id, lambda current: lifecycle.epoch_done(current, event, now)
        )
        if job is None:
            raise PermanentError(f"epoch from {event.instance} for unknown job {event.job_id}")
        store.put_epoch(event.job_id, lifecycle.epoch_doc(event, now))
        training = True
    else:
        _heartbeat(event, now)
        training = event.phase in (JobSubstatus.TRAINING, JobSubstatus.RETURNING)

    def seen(instance: InstanceDoc) -> InstanceDoc:
        alive = lifecycle.instance_seen(instance, now)
        return lifecycle.instance_executing(alive, now) if training else alive

    store.update_instance(event.instance, seen)


def _heartbeat(event: Heartbeat, now: datetime) -> None:
    job = deps.store().update_job(
        event.job_id, lambda current: lifecycle.heartbeat(current, event, now)
    )
    if job is None:
        raise PermanentError(f"heartbeat from {event.instance} for unknown job {event.job_id}")
