"""Turning a Pub/Sub CloudEvent into a message, and the handler's error policy.

Two shapes reach a handler, and both carry the message under ``data.message``:
production's binary-mode CloudEvent from Eventarc, and the push envelope the
Pub/Sub emulator sends, which the functions framework converts (taking the
topic from the request path ``/projects/P/topics/T``).
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from spotline.functions import deps as process_deps
from spotline.functions.deps import Deps
from spotline.functions.ops.outbox import one_request
from spotline.shared import logs
from spotline.shared.domain.errors import InvalidMessage, PermanentError
from spotline.shared.domain.secret_env import masked_start
from spotline.shared.domain.spec import describe_validation_error

Model = TypeVar("Model", bound=BaseModel)
_ID_CHARS = 128  # Pub/Sub's message ids are short numbers
_PAYLOAD_LOGGED = 200
# A token cut short at the 200th byte is redacted too (no closing quote).
_TOKEN = re.compile(r'"token"\s*:\s*"[^"]*"?')


@dataclass(frozen=True)
class Message:
    data: bytes
    message_id: str
    publish_time: datetime | None
    attributes: dict[str, str] = field(default_factory=dict)
    source: str = ""

    def parse(self, model: type[Model]) -> Model:
        """The payload as ``model``; InvalidMessage names every bad field."""
        try:
            return model.model_validate_json(self.data)
        except ValidationError as err:
            raise InvalidMessage(describe_validation_error(err)) from err
        except (ValueError, RecursionError) as err:  # past pydantic's own limits: no JSON either
            raise InvalidMessage(f"the message is not JSON: {type(err).__name__}") from err


def decode(cloud_event: Any) -> Message:
    """The Pub/Sub message inside a CloudEvent.

    Raises:
        InvalidMessage: the event carries no Pub/Sub message, or its data is not
            a base64 string.
    """
    data = cloud_event.data if hasattr(cloud_event, "data") else None
    message = data.get("message") if isinstance(data, dict) else None
    if not isinstance(message, dict):
        raise InvalidMessage("the CloudEvent carries no Pub/Sub message")
    encoded = message.get("data") or ""
    if not isinstance(encoded, str):
        raise InvalidMessage(f"the message data is a {type(encoded).__name__}, not base64 text")
    try:
        payload = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as err:
        raise InvalidMessage(f"the message data is not base64: {err}") from err
    message_id = message.get("messageId") or message.get("message_id") or cloud_event["id"]
    attributes = message.get("attributes")
    return Message(
        data=payload,
        message_id=str(message_id)[:_ID_CHARS],
        publish_time=_parse_time(message.get("publishTime") or message.get("publish_time")),
        attributes=(
            {str(k): str(v) for k, v in attributes.items()} if isinstance(attributes, dict) else {}
        ),
        source=str(cloud_event["source"]),
    )


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


Handler = Callable[[Message, Deps], None]


def pubsub_handler(fn: Handler) -> Callable[[Any], None]:
    """Wrap a handler of decoded messages with spotline's error policy, and
    hand it the process's dependencies (``spotline.functions.deps.current()``).

    * a message older than the configured maximum age is dropped with a log line;
    * PermanentError: logged with its reason, then acknowledged (return);
    * anything else propagates: the framework answers 500 and Pub/Sub redelivers.

    The invocation is one request of the outbox (``spotline.functions.ops.outbox``):
    the events its job writes publish leave the outboxes once per job.
    """

    @functools.wraps(fn)
    def handle(cloud_event: Any) -> None:
        name = fn.__name__
        try:
            message = decode(cloud_event)
        except InvalidMessage as err:
            logs.error(f"{name}: dropped an undecodable event: {err}", handler=name)
            return
        deps = process_deps.current()
        age_s = _age_s(message, deps.clock())
        if age_s is not None and age_s > deps.settings.max_event_age_s:
            logs.warning(
                f"{name}: dropped message {message.message_id}, {age_s:.0f} s old",
                handler=name,
                message_id=message.message_id,
            )
            return
        try:
            with one_request():
                fn(message, deps)
        except PermanentError as err:
            # Acknowledged: the reason, and for a message that is not valid the
            # start of what was published, are all that is kept of it.
            invalid = isinstance(err, InvalidMessage)
            logs.warning(
                f"{name}: {err}",
                handler=name,
                message_id=message.message_id,
                error_type=type(err).__name__,
                **({"payload": _start(message.data)} if invalid else {}),
            )

    return handle


def _start(data: bytes) -> str:
    """The start of a refused payload, for the log, with no secret-like env
    value (``spotline.shared.domain.secret_env``) and no event token (a VM's
    credential: ``spotline.shared.domain.event_auth``) in it."""
    start = masked_start(data, _PAYLOAD_LOGGED)
    return _TOKEN.sub('"token": "(not logged)"', start)


def _age_s(message: Message, now: datetime) -> float | None:
    if message.publish_time is None:
        return None
    return (now - message.publish_time).total_seconds()
