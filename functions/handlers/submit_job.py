"""spotline-submit -> submit_job: validate the spec, create the job, get a VM."""

from __future__ import annotations

from datetime import datetime

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message, pubsub_handler
from spotline.functions.ops.jobs import admit, start
from spotline.shared.domain.documents import Rejection
from spotline.shared.domain.errors import InvalidMessage, PermanentError
from spotline.shared.domain.identity import refusal
from spotline.shared.domain.secret_env import masked_start
from spotline.shared.domain.spec import parse_spec, too_many_nodes

_PAYLOAD_KEPT = 1024


@pubsub_handler
def submit_job(message: Message, deps: Deps) -> None:
    now = deps.clock()
    try:
        spec = parse_spec(message.data)
    except InvalidMessage as err:
        _reject(deps, message, f"not a valid job spec: {err}", now)
        raise
    try:
        refused = refusal("submit", spec.user, message.source, deps.settings.user_topics)
        if refused is not None:
            raise PermanentError(refused)
        too_many = too_many_nodes(spec, deps.settings.max_active_instances)
        if too_many is not None:
            raise PermanentError(too_many)
        job = admit(deps, spec, message.message_id, now)
    except PermanentError as err:
        _reject(deps, message, str(err), now)
        raise
    start(deps, job, now)


def _reject(deps: Deps, message: Message, reason: str, now: datetime) -> None:
    """Kept for ``spotline rejections``: the person sees why, with the payload's start."""
    deps.store.record_rejection(
        Rejection(
            message_id=message.message_id,
            reason=reason,
            # Never a secret-like env value, which the reason may be about.
            payload=masked_start(message.data, _PAYLOAD_KEPT),
            at=now,
        )
    )
