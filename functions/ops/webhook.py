"""POSTing a job's state-change event to the job's ``webhook_url``.

The ``notify_webhook`` function is subscribed to ``spotline-job-events``, so
a webhook never holds up a transition, and its retries are Pub/Sub's: a 5xx
answer, a timeout or a refused connection raises, the event is redelivered
with backoff and, after the topology's attempts, goes to the dead-letter
topic. A 4xx answer is the receiver refusing the event for good: logged and
acknowledged. Redirects are not followed (a redirect could lead to an
address the rules refuse).

Every address the host resolves to is checked (``spotline.shared.domain.webhooks``)
before the request; the request then resolves the name again, so a name whose
answer changes in between could still lead elsewhere. Receivers get each event
at least once and in no set order: they sort by ``sequence`` and dedupe by
``event_id`` (the ``X-Spotline-Event-Id`` header too).
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from spotline.functions.deps import Deps
from spotline.shared import logs
from spotline.shared.domain.errors import PermanentError, TransientError
from spotline.shared.domain.job_events import NO_WEBHOOK, WEBHOOK_ATTRIBUTE, JobEvent
from spotline.shared.domain.webhooks import address_problem, url_problem

_TIMEOUT_S = 10.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: object, **__: object) -> None:
        return None  # the 3xx comes back as an HTTPError


_OPENER = urllib.request.build_opener(_NoRedirect)


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
    for address in [] if problem else _addresses(parts.hostname or "", parts.port):
        problem = address_problem(address, networks, plain_http=plain)
        if problem:
            break
    if problem:
        raise PermanentError(f"job {event.job_id}: event {event.event_id} not posted: {problem}")
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "spotline-webhook/1",
            "X-Spotline-Event-Id": event.event_id,
        },
    )
    try:
        with _OPENER.open(request, timeout=_TIMEOUT_S) as answer:
            status = int(answer.status)
    except urllib.error.HTTPError as err:
        if err.code >= 500:
            raise TransientError(f"{event.event_id}: the webhook answered {err.code}") from err
        raise PermanentError(
            f"job {event.job_id}: the webhook refused {event.event_id} ({err.code})"
        ) from err
    except (urllib.error.URLError, TimeoutError, OSError) as err:
        raise TransientError(f"{event.event_id}: the webhook is unreachable: {err}") from err
    logs.info(
        f"job {event.job_id}: posted {event.event_id} ({status})",
        job_id=event.job_id,
        event_id=event.event_id,
    )
    return status


def _addresses(host: str, port: int | None) -> list[str]:
    """Every address ``host`` resolves to (DNS failure: transient)."""
    try:
        found = socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
    except socket.gaierror as err:
        raise TransientError(f"webhook host {host} does not resolve: {err}") from err
    return sorted({str(info[4][0]).split("%")[0] for info in found})
