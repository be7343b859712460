"""JSON field helpers for ``CloudDouble``, and the Pub/Sub its APIs see.

The request handler, the recorded requests and Google's error body are the
local cloud's (``spotline.infra.localcloud.wire``): one copy of the HTTP plumbing.
"""

from __future__ import annotations

import re
from typing import Any

import requests

from spotline.infra.localcloud.wire import JsonDict

# google.rpc.Code numbers, for errors inside a finished operation.
RPC_CODES = {"INVALID_ARGUMENT": 3, "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "INTERNAL": 13}


def camel(path: str) -> str:
    """``service_config.timeout_seconds`` -> ``serviceConfig.timeoutSeconds``."""
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), path)


def mask_paths(query: dict[str, str]) -> list[str]:
    """The update mask of a PATCH, as camelCase JSON paths."""
    return [camel(path.strip()) for path in query.get("updateMask", "").split(",") if path.strip()]


def enum_value(value: Any, names: list[str]) -> str:
    """An enum field as its name, whether the client sent a number or a name."""
    if isinstance(value, int):
        return names[value] if 0 <= value < len(names) else str(value)
    return str(value or names[0])


def get_path(document: JsonDict, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(document, dict):
            return None
        document = document.get(key)  # type: ignore[assignment]
    return document


def set_path(document: JsonDict, path: str, value: Any) -> None:
    """Set (or, for None, remove) the field at a dotted JSON path."""
    *parents, last = path.split(".")
    for key in parents:
        document = document.setdefault(key, {})
    if value is None:
        document.pop(last, None)
    else:
        document[last] = value


class PubsubSide:
    """The Pub/Sub the doubled APIs see: the emulator at ``host`` when given,
    else just the set ``topics`` of topic names that exist."""

    def __init__(self, host: str | None) -> None:
        self.host = host
        self.topics: set[str] = set()

    def topic_exists(self, topic: str) -> bool:
        return self.exists(topic)

    def exists(self, name: str) -> bool:
        """Whether a topic or subscription (its full name) exists."""
        if self.host is None:
            return name in self.topics
        answer = requests.get(f"http://{self.host}/v1/{name}", timeout=10)
        if answer.status_code == 404:
            return False
        answer.raise_for_status()
        return True

    def create_subscription(self, name: str, topic: str) -> None:
        """A push-less subscription, as Eventarc makes one per trigger (its ack
        deadline: an assumption; its backoff: Eventarc's documented 10-600 s)."""
        if self.host is None:
            return
        body: JsonDict = {
            "topic": topic,
            "ackDeadlineSeconds": 600,
            "retryPolicy": {"minimumBackoff": "10s", "maximumBackoff": "600s"},
        }
        answer = requests.put(f"http://{self.host}/v1/{name}", json=body, timeout=10)
        answer.raise_for_status()

    def delete(self, name: str) -> None:
        """Delete a topic or subscription (its full name), if there."""
        if self.host is None:
            self.topics.discard(name)
            return
        answer = requests.delete(f"http://{self.host}/v1/{name}", timeout=10)
        if answer.status_code != 404:
            answer.raise_for_status()
