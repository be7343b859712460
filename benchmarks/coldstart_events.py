"""The events a cold start is measured with: for each function, a message its
handler acts on, for a job made ready for it in the emulator.

Why not any message: a handler refuses an event for a job that does not exist
(or one without its attempt's token, or a progress report without its
``kind``) before it reads or writes anything, so its "first request" skipped
what a cold instance really pays (on_epoch_done's took 0.01 s: it never built
the Firestore client). Here each job is made by the real submit path
(``spotline.functions.ops`` ``admit`` and ``start``: Firestore, the local cloud's
Compute Engine, the job-events topic), brought to the phase its event comes
in (as ``scale_world.template`` does), and the event carries the token its
VM was handed. ``took_effect`` then checks, on the stored job, that the
handler did what it does for a real event.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from spotline.functions.deps import Deps
from spotline.functions.ops.jobs import admit, start
from spotline.functions.ops.sweep_pages import SweepPage
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.job_events import with_event
from spotline.shared.domain.lifecycle import advance, instance_executing, instance_seen
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.vms import EVENT_TOKEN_METADATA_KEY
from spotline.shared.settings import TOPICS

MACHINE = "g2-standard-4"
TRAINER = "digits_mlp"
EPOCHS = 2


def spec(key: str, **more: Any) -> dict[str, Any]:
    """A submission of its own: its own job id and user (no quota shared)."""
    key = key.replace("_", "-")  # ids are lower case, digits and dashes
    return {
        "user": f"u-{key}",
        "machine_ids": [MACHINE],
        "trainer": TRAINER,
        "epochs": EPOCHS,
        "job_id": f"cold-{key}",
        **more,
    }


def create_topics(project: str) -> None:
    """Every spotline topic in the Pub/Sub emulator (PUBSUB_EMULATOR_HOST),
    so that the state changes a handler publishes go out, as deployed."""
    from google.api_core.exceptions import AlreadyExists
    from google.pubsub_v1 import PublisherClient

    publisher = PublisherClient()
    for topic in TOPICS.values():
        with suppress(AlreadyExists):
            publisher.create_topic(name=publisher.topic_path(project, topic))


@contextmanager
def webhook_receiver() -> Iterator[tuple[str, list[str]]]:
    """An HTTP receiver on loopback for notify_webhook: its URL, and the event
    ids POSTed to it so far."""
    received: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            received.append(self.headers.get("X-Spotline-Event-Id", ""))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class World:
    """Where the jobs are made: the functions' own dependencies (Firestore,
    the local cloud, Pub/Sub), the local cloud (the VMs' tokens), and a
    webhook receiver (its URL, what it got)."""

    deps: Deps
    cloud: LocalCloud
    webhook_url: str
    webhook_got: list[str]


@dataclass(frozen=True)
class Event:
    """One message for a function, and how to tell that it was acted on."""

    payload: dict[str, Any]
    # None, or why the event looks dropped (read from the store, the receiver).
    took_effect: Callable[[], str | None]


def placed(deps: Deps, key: str, **more: Any) -> JobDoc:
    """Job ``cold-KEY`` as a submission leaves it: created, its VM inserted."""
    now = datetime.now(UTC)
    submitted = JobSpec.model_validate(spec(key, **more))
    job = start(deps, admit(deps, submitted, f"m-{key}", now), now)
    if job.instance is None:
        raise RuntimeError(f"job {job.job_id} got no VM: {job.substatus} {job.error or ''}")
    return job


def training(deps: Deps, key: str) -> JobDoc:
    """Job ``cold-KEY`` training on its executing VM, its heartbeat now."""
    job = placed(deps, key)
    now = datetime.now(UTC)
    for phase in (
        JobSubstatus.GEARING_UP_ENV,
        JobSubstatus.SENDING_MODEL_AND_DATA,
        JobSubstatus.TRAINING,
    ):
        deps.store.update_job(job.job_id, partial(advance, to=phase, now=now))
    assert job.instance is not None
    deps.store.update_instance(
        job.instance, lambda i: instance_executing(instance_seen(i, now, booted=True), now)
    )
    trained = deps.store.get_job(job.job_id)
    assert trained is not None
    return trained


def vm_fields(cloud: LocalCloud, job: JobDoc) -> dict[str, Any]:
    """What the job's VM says of itself in each event: its job, attempt, name
    and the token from its metadata."""
    assert job.instance is not None
    vm = cloud.get(job.instance)
    if vm is None:
        raise RuntimeError(f"no VM {job.instance} in the local cloud")
    return {
        "job_id": job.job_id,
        "attempt": job.attempt,
        "instance": job.instance,
        "sent_at": datetime.now(UTC).isoformat(),
        "token": vm["metadata"][EVENT_TOKEN_METADATA_KEY],
    }


def _expect(deps: Deps, job_id: str, what: str, test: Callable[[JobDoc], bool]) -> Event:
    """The check that job ``job_id`` reads as ``what`` (``test``)."""

    def check() -> str | None:
        job = deps.store.get_job(job_id)
        if job is None:
            return f"no job {job_id}"
        return None if test(job) else f"{job_id}: expected {what}, is {job.status}/{job.substatus}"

    return Event({}, check)


def event_for(topic: str, world: World, key: str) -> Event:
    """A message on ``topic`` (a key of ``spotline.shared.settings.TOPICS``) that its
    function acts on, with its job made ready under ``key``."""
    deps = world.deps
    if topic == "submit":
        body = spec(key)
        check = _expect(deps, body["job_id"], "a VM placed", lambda j: bool(j.instance))
        return Event(body, check.took_effect)
    if topic == "reaper_tick":  # a sweep of whatever the other jobs left
        return Event({"sent_at": datetime.now(UTC).isoformat()}, lambda: None)
    if topic == "reaper_page":  # one page of a tick: a running job's cost, due
        job = training(deps, key)
        listed = datetime.now(UTC)
        page = SweepPage(kind="jobs", listed_at=listed, keys=[job.job_id])

        # Priced when the page runs (it is applied at its own time, not the tick's).
        def priced_since(j: JobDoc) -> bool:
            return j.cost_as_of is not None and j.cost_as_of >= listed

        priced = _expect(deps, job.job_id, "its cost priced", priced_since)
        return Event(page.model_dump(mode="json"), priced.took_effect)
    if topic == "job_events":
        job = placed(deps, key, webhook_url=world.webhook_url)
        [event] = with_event(job, None, datetime.now(UTC), "submitted").pending_events[-1:]

        def posted() -> str | None:
            return None if event.event_id in world.webhook_got else "the webhook got nothing"

        return Event(event.model_dump(mode="json"), posted)
    if topic == "vm_booted":
        job = placed(deps, key)
        booted = _expect(deps, job.job_id, "gearing up", lambda j: j.substatus == "GEARING_UP_ENV")
        return Event({**vm_fields(world.cloud, job), "zone": job.zone or ""}, booted.took_effect)
    job = training(deps, key)
    if topic == "cancel":
        canceled = _expect(deps, job.job_id, "CANCELED", lambda j: j.status == JobStatus.CANCELED)
        return Event({"job_id": job.job_id}, canceled.took_effect)
    vm = vm_fields(world.cloud, job)
    if topic == "epoch_done":
        epoch = {"kind": "epoch", "epoch": 1, "epochs": EPOCHS, "step": 10, "metrics": {"loss": 1}}
        counted = _expect(deps, job.job_id, "epoch 1", lambda j: j.epoch == 1)
        return Event({**vm, **epoch}, counted.took_effect)
    if topic == "job_finished":
        done = _expect(deps, job.job_id, "COMPLETED", lambda j: j.status == JobStatus.COMPLETED)
        return Event({**vm, "exit_code": 0}, done.took_effect)
    if topic == "spot_preempted":
        again = _expect(deps, job.job_id, "attempt 2", lambda j: j.attempt == 2)
        return Event({**vm, "step": 10}, again.took_effect)
    raise ValueError(f"no cold-start event for topic {topic!r}")
