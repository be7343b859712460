"""spotline-job-events -> notify_webhook: a job's state change, POSTed to the
job's ``webhook_url`` (``functions.ops.webhook``); jobs without one: nothing."""

from __future__ import annotations

from functions.deps import Deps
from functions.handlers.envelope import Message, pubsub_handler
from functions.ops.webhook import post_event
from shared.domain.job_events import JobEvent


@pubsub_handler
def notify_webhook(message: Message, deps: Deps) -> None:
    post_event(deps, message.parse(JobEvent), message.data)
