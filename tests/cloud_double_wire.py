"""The wire side of ``CloudDouble``: requests as recorded, errors as the Google
REST APIs write them, the HTTP handler, and JSON field helpers.

Unlike Compute Engine, these APIs answer errors with a canonical ``status``
(``NOT_FOUND``, ``ALREADY_EXISTS``...), and the source upload is a raw zip.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import requests

JsonDict = dict[str, Any]

_STATUS = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
}
# google.rpc.Code numbers, for errors inside a finished operation.
RPC_CODES = {"INVALID_ARGUMENT": 3, "NOT_FOUND": 5, "ALREADY_EXISTS": 6}


@dataclass(frozen=True)
class CloudRequest:
    """One request as it reached the double."""

    method: str
    path: str
    query: dict[str, str]  # the last value of each parameter
    body: Any  # the parsed JSON body, or None (an upload is not JSON)
    content: bytes
    headers: dict[str, str]  # lower-case names


class CloudError(Exception):
    """An error answer: an HTTP status and Google's JSON error body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.status_name = _STATUS.get(status, "UNKNOWN")
        self.body = {"error": {"code": status, "message": message, "status": self.status_name}}


class Answerer(Protocol):
    def handle(self, request: CloudRequest) -> tuple[int, JsonDict]: ...


class Handler(BaseHTTPRequestHandler):
    """Turns each HTTP request into a ``CloudRequest`` for ``owner`` to answer."""

    owner: Answerer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        method = self.command
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        content = self.rfile.read(length) if length else b""
        body = None
        if content and "json" in (self.headers.get("Content-Type") or "json"):
            with contextlib.suppress(ValueError):
                body = json.loads(content)
        headers = {key.lower(): value for key, value in self.headers.items()}
        status, answer = self.owner.handle(
            CloudRequest(method, url.path, query, body, content, headers)
        )
        payload = json.dumps(answer).encode()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET


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
        if self.host is None:
            return topic in self.topics
        answer = requests.get(f"http://{self.host}/v1/{topic}", timeout=10)
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
