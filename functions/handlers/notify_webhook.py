"""spotline-job-events -> notify_webhook: a job's state change, POSTed to the
job's ``webhook_url`` (``spotline.functions.ops.webhook``); jobs without one: nothing,
and an event marked ``webhook: "0"`` (its attributes) not even a read.

In production Eventarc makes this trigger's subscription, and a Pub/Sub
trigger filters on the event type alone (a subscription's filter is set when
it is created, by Eventarc): such events still invoke the function, which
returns at once."""

from __future__ import annotations

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message, pubsub_handler
from spotline.functions.ops.webhook import post_event
from spotline.shared.domain.job_events import JobEvent


@pubsub_handler
def notify_webhook(message: Message, deps: Deps) -> None:
    post_event(deps, message.parse(JobEvent), message.data, message.attributes)
