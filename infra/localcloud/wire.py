"""The HTTP plumbing every local Google API shares: one request handler that
records each request, one Google error body, and one loopback server.

An API is any object with ``handle(request) -> (status, json)``; ``HttpService``
serves it on ``127.0.0.1`` and a free port, from daemon threads::

    service = HttpService(api).start()
    client = SomeClient(api_endpoint=service.endpoint)
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, Self
from urllib.parse import parse_qs, urlsplit

from spotline.infra.localcloud.discovery import Contract

JsonDict = dict[str, Any]

# google.rpc.Code names by HTTP status, as Google's JSON error bodies spell them.
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
# serve_forever notices shutdown() only between polls.
POLL_S = 0.05


@dataclass(frozen=True)
class RecordedRequest:
    """One request as it reached a local API."""

    method: str
    path: str
    query: dict[str, str]  # the last value of each parameter
    body: Any  # the parsed JSON body, or None (no body, or not JSON)
    headers: dict[str, str]  # lower-case names
    content: bytes = b""  # the raw body (an upload is not JSON)


def error_body(
    status: int, message: str, reason: str | None = None, details: list[JsonDict] | None = None
) -> JsonDict:
    """Google's JSON error body: ``code``, ``message`` and ``status`` as every API
    writes them, ``errors[].reason`` as Compute Engine's clients read it, and
    ``details`` (``google.rpc.ErrorInfo`` and the like) where the API sends them."""
    error: JsonDict = {
        "code": status,
        "message": message,
        "status": STATUS_NAMES.get(status, "UNKNOWN"),
    }
    if reason is not None:
        error["errors"] = [{"message": message, "domain": "global", "reason": reason}]
    if details:
        error["details"] = details
    return {"error": error}


class ApiError(Exception):
    """An error answer: an HTTP status and Google's error body."""

    def __init__(
        self,
        status: int,
        message: str,
        reason: str | None = None,
        details: list[JsonDict] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details

    @property
    def body(self) -> JsonDict:
        return error_body(self.status, self.message, self.reason, self.details)


class Api(Protocol):
    def handle(self, request: RecordedRequest) -> tuple[int, JsonDict]: ...


class RequestHandler(BaseHTTPRequestHandler):
    """Turns each HTTP request into a ``RecordedRequest`` for ``api`` to answer."""

    api: Api

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        content = self.rfile.read(length) if length else b""
        body = None
        if content and "json" in (self.headers.get("Content-Type") or "json"):
            with contextlib.suppress(ValueError):
                body = json.loads(content)
        headers = {key.lower(): value for key, value in self.headers.items()}
        request = RecordedRequest(self.command, url.path, query, body, headers, content)
        try:
            status, answer = self.api.handle(request)
        except ApiError as error:
            status, answer = error.status, error.body
        payload = json.dumps(answer).encode()
        # A client whose timeout ran out has gone; that is its business.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch


class HttpService:
    """Serves one ``Api`` on a free 127.0.0.1 port from a daemon thread."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> Self:
        handler = type("BoundRequestHandler", (RequestHandler,), {"api": self.api})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(
            target=server.serve_forever, args=(POLL_S,), name="local-api", daemon=True
        ).start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    @property
    def endpoint(self) -> str:
        """The ``api_endpoint`` to give a client, e.g. ``http://127.0.0.1:8089``."""
        if self._server is None:
            raise RuntimeError("start() the service first")
        return f"http://127.0.0.1:{self._server.server_address[1]}"


class Recorder:
    """The requests an API has seen, in order, for tests to assert on.

    Args:
        contract: the Google APIs the server stands in for: each request
            recorded is checked against their discovery documents, and one that
            breaks them is refused (``record`` raises Google's 400 or 404).
    """

    def __init__(self, contract: Contract | None = None) -> None:
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self.contract = contract

    def record(self, request: RecordedRequest) -> None:
        """Keep ``request``.

        Raises:
            ApiError: it breaks the contract's published definitions.
        """
        with self._lock:
            self._requests.append(request)
        if self.contract is None:
            return
        has_body = bool(request.content)
        refusal = self.contract.record(
            request.method, request.path, request.query, request.body, has_body
        )
        if refusal is None:
            return
        details = None
        if refusal.status == 400:
            violation = {"field": refusal.field, "description": refusal.message}
            bad_request = "type.googleapis.com/google.rpc.BadRequest"
            details = [{"@type": bad_request, "fieldViolations": [violation]}]
        reason = "invalid" if refusal.status == 400 else "notFound"
        raise ApiError(refusal.status, refusal.message, reason, details)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_to(self, method: str, path_suffix: str) -> list[RecordedRequest]:
        """The recorded requests with this method whose path ends with ``path_suffix``."""
        return [r for r in self.requests if r.method == method and r.path.endswith(path_suffix)]
