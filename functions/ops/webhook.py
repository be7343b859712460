"""POSTing a job's state-change event to the job's ``webhook_url``.

The ``notify_webhook`` function is subscribed to ``spotline-job-events``, so
a webhook never holds up a transition, and its retries are Pub/Sub's: a 5xx
answer, a timeout or a refused connection raises, the event is redelivered
with backoff and, after the topology's attempts, goes to the dead-letter
topic. A 4xx answer is the receiver refusing the event for good: logged and
acknowledged. Redirects are not followed (a redirect could lead to an
address the rules refuse).

The host is resolved once; every address of the answer is checked
(``spotline.shared.domain.webhooks``), and the request connects to a checked
address: the name is not resolved again, so an answer that changes in
between (DNS rebinding) cannot lead it elsewhere. TLS still verifies the
certificate for the name (SNI and the Host header carry it). Receivers get each event
at least once and in no set order: they sort by ``sequence`` and dedupe by
``event_id`` (the ``X-Spotline-Event-Id`` header too).
"""

from __future__ import annotations

import http.client
import socket
import ssl
from urllib.parse import SplitResult, urlsplit

from spotline.functions.deps import Deps
from spotline.shared import logs
from spotline.shared.domain.errors import PermanentError, TransientError
from spotline.shared.domain.job_events import NO_WEBHOOK, WEBHOOK_ATTRIBUTE, JobEvent
from spotline.shared.domain.webhooks import address_problem, url_problem

_TIMEOUT_S = 10.0


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Plain http to ``address``, whatever the name resolves to now."""

    def __init__(self, host: str, port: int | None, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """https to ``address``; the certificate is verified for the name."""

    def __init__(self, host: str, port: int | None, address: str, timeout: float) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self._tls)
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)


def post_event(
    deps: Deps, event: JobEvent, body: bytes, attributes: dict[str, str] | None = None
) -> int | None:
    """POST ``body`` (the event's JSON, as published) to the job's webhook;
    the answer's status, or None when the job has no webhook.

    An event whose ``webhook`` attribute is ``"0"`` (``spotline.functions.ops.outbox``
    marks each event from the job's spec, which never changes after the
    submission) returns None at once: most jobs have no webhook, and reading
    the job for each of their events was a read per state change. Any other
    value, or none (an event published before the mark existed), reads the
    job as before.

    Raises:
        PermanentError: the URL or one of its addresses is refused, or the
            receiver answered 4xx or 3xx (acknowledged: no retry helps).
        TransientError: 5xx, a timeout, or no connection (Pub/Sub redelivers).
    """
    if (attributes or {}).get(WEBHOOK_ATTRIBUTE) == NO_WEBHOOK:
        return None
    job = deps.store.get_job(event.job_id)
    url = job.spec.webhook_url if job is not None else None
    if url is None:
        return None
    networks = deps.settings.webhook_allowed_networks
    problem = url_problem(url, networks)
    parts = urlsplit(url)
    plain = parts.scheme == "http"
    addresses = [] if problem else _addresses(parts.hostname or "", parts.port)
    for address in addresses:
        problem = address_problem(address, networks, plain_http=plain)
        if problem:
            break
    if problem:
        raise PermanentError(f"job {event.job_id}: event {event.event_id} not posted: {problem}")
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "spotline-webhook/1",
        "X-Spotline-Event-Id": event.event_id,
    }
    try:
        status = _post_pinned(parts, addresses[0], body, headers)
    except (http.client.HTTPException, OSError) as err:  # TimeoutError, ssl errors too
        raise TransientError(f"{event.event_id}: the webhook is unreachable: {err}") from err
    if status >= 500:
        raise TransientError(f"{event.event_id}: the webhook answered {status}")
    if status >= 300:
        raise PermanentError(f"job {event.job_id}: the webhook refused {event.event_id} ({status})")
    logs.info(
        f"job {event.job_id}: posted {event.event_id} ({status})",
        job_id=event.job_id,
        event_id=event.event_id,
    )
    return status


def _post_pinned(parts: SplitResult, address: str, body: bytes, headers: dict[str, str]) -> int:
    """POST ``body`` to the URL ``parts`` through a connection to ``address``
    (the Host header and TLS name are the URL's); the answer's status.
    No redirect is followed: http.client follows none."""
    kind = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
    connection = kind(parts.hostname or "", parts.port, address, _TIMEOUT_S)
    target = parts.path or "/"
    if parts.query:
        target += f"?{parts.query}"
    try:
        connection.request("POST", target, body=body, headers=headers)
        answer = connection.getresponse()
        answer.read()
        return int(answer.status)
    finally:
        connection.close()


def _addresses(host: str, port: int | None) -> list[str]:
    """Every address ``host`` resolves to (DNS failure: transient)."""
    try:
        found = socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
    except socket.gaierror as err:
        raise TransientError(f"webhook host {host} does not resolve: {err}") from err
    addresses = sorted({str(info[4][0]).split("%")[0] for info in found})
    if not addresses:
        raise TransientError(f"webhook host {host} resolved to no address")
    return addresses
