"""spotline-cancel -> cancel_job: a person stops a job; its VM is deleted."""

from __future__ import annotations

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message, pubsub_handler
from spotline.functions.ops.jobs import cancel
from spotline.shared.contract.events import CancelRequest
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.identity import refusal


@pubsub_handler
def cancel_job(message: Message, deps: Deps) -> None:
    request = message.parse(CancelRequest)
    users = deps.settings.user_topics
    if users:
        job = deps.store.get_job(request.job_id)
        # An unknown job: cancel() says so. A job's user never changes.
        refused = refusal("cancel", job.user, message.source, users) if job else None
        if refused is not None:
            raise PermanentError(f"cancel of {request.job_id} refused: {refused}")
    cancel(deps, request.job_id, request.reason, deps.clock())
