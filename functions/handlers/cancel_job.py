"""spotline-cancel -> cancel_job: a person stops a job; its VM is deleted."""

from __future__ import annotations

from functions.deps import Deps
from functions.handlers.envelope import Message, pubsub_handler
from functions.ops.jobs import cancel
from shared.contract.events import CancelRequest


@pubsub_handler
def cancel_job(message: Message, deps: Deps) -> None:
    request = message.parse(CancelRequest)
    cancel(deps, request.job_id, request.reason, deps.clock())
