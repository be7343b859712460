"""The notify_webhook function POSTing a job's events to a receiver on
127.0.0.1 through the real functions framework, the job in the Firestore
emulator; which URLs are refused is in ``tests/unit/test_webhook_urls.py``."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.counting_store import CountingStore
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.job_events import JobEvent
from tests.conftest import SPEC

# -- the function, posting to a receiver on 127.0.0.1 --


class Receiver:
    """An HTTP server on 127.0.0.1 (or ``address``) that records POSTs and
    answers ``status``."""

    def __init__(
        self, address: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        self.status = 200
        self.posts: list[tuple[dict[str, str], dict[str, Any]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.posts.append((dict(self.headers), json.loads(body)))
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer((address, port), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"http://{address}:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


@pytest.fixture
def local_webhooks(monkeypatch: pytest.MonkeyPatch, host: LocalCloud) -> None:
    monkeypatch.setenv("SPOTLINE_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")
    deps.reset()


def an_event(job_id: str = "job1", sequence: int = 2) -> JobEvent:
    return JobEvent(
        event_id=f"{job_id}/{sequence}",
        job_id=job_id,
        user="alice",
        sequence=sequence,
        status="QUEUING",
        substatus="CONNECTING_SERVER",
        previous_status="QUEUING",
        previous_substatus="REQUESTING_SERVER",
        attempt=1,
        at=datetime(2026, 1, 2, tzinfo=UTC),
    )


@pytest.mark.emulators
def test_the_event_is_posted_as_published_with_its_id(
    call: Callable[..., Any], project: str, receiver: Receiver, local_webhooks: None
) -> None:
    assert call("submit_job", "submit", {**SPEC, "webhook_url": receiver.url}).status_code == 200
    event = an_event()

    assert call("notify_webhook", "job_events", event).status_code == 200

    [(headers, body)] = receiver.posts
    assert headers["X-Spotline-Event-Id"] == "job1/2"
    assert headers["Content-Type"] == "application/json"
    assert JobEvent.model_validate(body) == event


@pytest.mark.emulators
def test_a_5xx_is_retried_by_pubsub_and_a_4xx_is_dropped(
    call: Callable[..., Any], project: str, receiver: Receiver, local_webhooks: None
) -> None:
    call("submit_job", "submit", {**SPEC, "webhook_url": receiver.url})
    receiver.status = 503
    assert call("notify_webhook", "job_events", an_event()).status_code == 500  # redelivered
    receiver.status = 200
    assert call("notify_webhook", "job_events", an_event()).status_code == 200
    receiver.status = 410
    assert call("notify_webhook", "job_events", an_event(sequence=3)).status_code == 200
    assert [h["X-Spotline-Event-Id"] for h, _ in receiver.posts] == ["job1/2", "job1/2", "job1/3"]


@pytest.mark.emulators
def test_an_address_no_longer_allowed_is_never_called(
    call: Callable[..., Any],
    project: str,
    receiver: Receiver,
    local_webhooks: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    via_name = receiver.url.replace("127.0.0.1", "localhost")
    call("submit_job", "submit", {**SPEC, "webhook_url": via_name})
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.spec.webhook_url == via_name
    monkeypatch.setenv("SPOTLINE_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/8")
    deps.reset()

    assert call("notify_webhook", "job_events", an_event()).status_code == 200  # acknowledged

    assert receiver.posts == []


@pytest.mark.emulators
def test_a_job_without_a_webhook_posts_nothing(
    call: Callable[..., Any], project: str, receiver: Receiver, local_webhooks: None
) -> None:
    call("submit_job", "submit", SPEC)
    assert call("notify_webhook", "job_events", an_event()).status_code == 200
    assert call("notify_webhook", "job_events", b"{not json").status_code == 200
    assert receiver.posts == []


@pytest.mark.emulators
def test_an_event_marked_without_a_webhook_reads_nothing_and_an_unmarked_one_reads_the_job(
    call: Callable[..., Any],
    project: str,
    receiver: Receiver,
    local_webhooks: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The outbox marks each event ``webhook`` "0" or "1" from the job's spec,
    which never changes after the submission: "0" is skipped with no read.
    An event with no mark (published before the mark existed) reads the job,
    as every event did, so none of a webhook's events is lost to the upgrade."""
    call("submit_job", "submit", SPEC)
    call("submit_job", "submit", {**SPEC, "job_id": "job2", "webhook_url": receiver.url}, "2")
    counting = CountingStore(FirestoreStore(project))
    monkeypatch.setattr(deps, "_current", deps.Deps(deps.settings_from_env(), store=counting))

    no_hook = {"webhook": "0", "event_id": "job1/2", "job_id": "job1"}
    assert call("notify_webhook", "job_events", an_event(), attributes=no_hook).status_code == 200
    assert (counting.ops.calls, counting.ops.reads) == (0, 0)

    assert call("notify_webhook", "job_events", an_event()).status_code == 200  # unmarked
    assert (counting.ops.calls, counting.ops.reads) == (1, 1)
    assert receiver.posts == []

    hooked = {"webhook": "1", "event_id": "job2/2", "job_id": "job2"}
    call("notify_webhook", "job_events", an_event("job2"), attributes=hooked)
    call("notify_webhook", "job_events", an_event("job2", 3))  # unmarked: still posted
    assert [h["X-Spotline-Event-Id"] for h, _ in receiver.posts] == ["job2/2", "job2/3"]


class Rebinding:
    """A resolver for ``name`` whose answer changes after the first question
    once armed: ``first``, then ``then`` (a DNS rebinding attack's server).
    Other names go to the real resolver."""

    def __init__(self, name: str, first: str, then: str) -> None:
        self.name, self.first, self.then = name, first, then
        self.armed = False
        self.asked = 0
        self._real = socket.getaddrinfo

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != self.name:
            return self._real(host, port, *args, **kwargs)
        address = self.first
        if self.armed:
            self.asked += 1
            address = self.first if self.asked == 1 else self.then
        return self._real(address, port, *args, **kwargs)


@pytest.mark.emulators
def test_a_rebinding_answer_does_not_reach_the_address_it_names(
    call: Callable[..., Any],
    project: str,
    receiver: Receiver,
    host: LocalCloud,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check sees 127.0.0.1 (allowed); asked again, the name says
    127.0.0.2, an internal service the rules refuse. The POST goes to the
    address that was checked, never to the one of the second answer."""
    monkeypatch.setenv("SPOTLINE_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.1/32")
    deps.reset()
    internal = Receiver("127.0.0.2", receiver.port)  # the same port, another address
    try:
        resolver = Rebinding("hooks.example.test", "127.0.0.1", "127.0.0.2")
        monkeypatch.setattr(socket, "getaddrinfo", resolver)
        url = f"http://hooks.example.test:{receiver.port}/hook"
        assert call("submit_job", "submit", {**SPEC, "webhook_url": url}).status_code == 200
        resolver.armed = True

        assert call("notify_webhook", "job_events", an_event()).status_code == 200

        assert internal.posts == [], "the POST went to the second answer's address"
        [(headers, _)] = receiver.posts
        assert headers["Host"] == f"hooks.example.test:{receiver.port}"
        assert resolver.asked == 1, "the name was resolved more than once"
    finally:
        internal.close()


@pytest.mark.emulators
def test_https_to_the_checked_address_still_verifies_the_hosts_certificate(
    call: Callable[..., Any],
    project: str,
    host: LocalCloud,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Connecting to the address, not the name, keeps TLS about the name: the
    server is asked for it (SNI) and its certificate must be for it."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=hooks.example.test",
         "-addext", "subjectAltName=DNS:hooks.example.test"],
        check=True, capture_output=True,
    )  # fmt: skip
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    asked: list[str | None] = []

    def remember(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        asked.append(name)

    tls.sni_callback = remember
    receiver = Receiver(tls=tls)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the only authority the POST trusts
    monkeypatch.setenv("SPOTLINE_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.1/32")
    deps.reset()
    # Both names answer 127.0.0.1; the certificate is for the first only.
    real = socket.getaddrinfo
    names = {"hooks.example.test", "other.example.test"}

    def resolve(host_name: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host_name in names else host_name, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    try:
        url = f"https://hooks.example.test:{receiver.port}/hook"
        call("submit_job", "submit", {**SPEC, "job_id": "tls1", "webhook_url": url})
        assert call("notify_webhook", "job_events", an_event("tls1")).status_code == 200
        [(headers, _)] = receiver.posts
        assert headers["Host"] == f"hooks.example.test:{receiver.port}"
        assert asked == ["hooks.example.test"]

        # A name the certificate does not cover: verification fails, nothing is posted.
        wrong = f"https://other.example.test:{receiver.port}/hook"
        call("submit_job", "submit", {**SPEC, "job_id": "tls2", "webhook_url": wrong})
        assert call("notify_webhook", "job_events", an_event("tls2")).status_code == 500
        assert len(receiver.posts) == 1
    finally:
        receiver.close()
