"""The two HTTP shapes in which a Pub/Sub message reaches a function.

* ``push``: what the Pub/Sub emulator (and a plain push subscription) POSTs:
  the push envelope, to ``/projects/P/topics/T``; the functions framework
  converts it into a CloudEvent.
* ``binary``: what Eventarc sends in production: a binary-mode CloudEvent,
  ``ce-*`` headers and the MessagePublishedData body.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from spotline.shared.settings import TOPICS


def _message(
    data: bytes, message_id: str, published: datetime | None, attributes: dict[str, str]
) -> dict[str, Any]:
    when = (published or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
    return {
        "data": base64.b64encode(data).decode(),
        "messageId": message_id,
        "publishTime": when,
        "attributes": attributes,
    }


def payload_bytes(payload: BaseModel | bytes | dict[str, Any]) -> bytes:
    if isinstance(payload, BaseModel):
        return payload.model_dump_json().encode()
    if isinstance(payload, dict):
        return json.dumps(payload).encode()
    return payload


def post(
    client: Any,
    project: str,
    topic_key: str,
    payload: BaseModel | bytes | dict[str, Any],
    message_id: str,
    mode: str = "push",
    published: datetime | None = None,
    topic_name: str | None = None,
    attributes: dict[str, str] | None = None,
) -> Any:
    """POST one message to a functions-framework test client; returns the response.

    It comes through topic ``topic_key``, or the topic named ``topic_name`` (a
    user's own topic), with the message's ``attributes``."""
    topic = f"projects/{project}/topics/{topic_name or TOPICS[topic_key]}"
    message = _message(payload_bytes(payload), message_id, published, attributes or {})
    body = {"message": message, "subscription": f"projects/{project}/subscriptions/s"}
    if mode == "push":
        return client.post(f"/{topic}", json=body)
    headers = {
        "ce-id": message_id,
        "ce-source": f"//pubsub.googleapis.com/{topic}",
        "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
        "ce-specversion": "1.0",
        "ce-time": message["publishTime"],
    }
    return client.post("/", json=body, headers=headers)
