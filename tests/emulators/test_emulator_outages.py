"""Dependencies failing: the Firestore and Pub/Sub emulators frozen
(SIGSTOP to their process group, then SIGCONT) or restarted mid-run.

A frozen backend holds every connection and answers nothing: a handler that
needs it must not acknowledge its message before its write happened, and
everything must converge once the backend is back, with the duplicate
deliveries Pub/Sub sends when an ack deadline passes meanwhile. The real
handlers run on the real emulators (Firestore through ``FirestoreStore``),
Compute is the local cloud (VMs are records), the agent is the real process.

A Firestore restart that keeps its data (an export through the emulator's own
route, then a start from it, on the same port) takes two emulator starts, so it
runs only with ``SPOTLINE_DEPS_RESTART=1`` (``make soak-deps``). A Pub/Sub
emulator restart loses topics, subscriptions and messages, which Pub/Sub
itself never does: it is not tested; its freeze is.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from google.api_core.exceptions import GoogleAPIError

from spotline.functions import deps as process_deps
from spotline.functions.deps import Deps
from spotline.functions.handlers.on_vm_booted import on_vm_booted
from spotline.functions.handlers.submit_job import submit_job
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.infra.localcloud.quotas import DEFAULT_LIMITS
from spotline.infra.localstack.emulators import Emulator, export_firestore, start_firestore
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.adapters.pubsub_bus import PubsubBus
from spotline.shared.adapters.recording_bus import RecordingBus
from spotline.shared.contract.events import JobFinished, VmBooted
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.settings import Settings
from tests.emulators.test_agent_failures import RunningAgent, Topics, start_agent, topics
from tests.replay import Published, cloud_event

__all__ = ["start_agent", "topics"]  # fixtures, used by name

pytestmark = pytest.mark.emulators
# How long a backend stays frozen; `make soak-deps` freezes it past the clients'
# 30 s per-call deadlines.
EVENT_TOKEN_KEY = "spotline-event-token"  # the VM's metadata item its events carry
FREEZE_S = float(os.environ.get("SPOTLINE_DEPS_FREEZE_S", "3"))
ZONES = ("us-central1-a", "us-central1-b")
Handler = Callable[[Any], None]


def deps_on(project: str, cloud: LocalCloud) -> Deps:
    """The handlers' dependencies: Firestore on the emulator, the local cloud."""
    settings = Settings(
        project=project,
        compute_endpoint=cloud.endpoint,
        zones=ZONES,
        storage_root="memory://spotline-outages",
        max_active_jobs=100,
        max_active_instances=100,
    )
    compute = GceCompute(project, api_endpoint=cloud.endpoint, read_retry_s=1.0)
    return Deps(settings, store=FirestoreStore(project), compute=compute, bus=RecordingBus(project))


@pytest.fixture
def installed(project: str) -> Iterator[tuple[Deps, LocalCloud]]:
    limits = {metric: 1e6 for metric in DEFAULT_LIMITS}
    with LocalCloud(project, RecordLauncher(), quota_limits=limits) as cloud:
        process_deps._current = deps_on(project, cloud)
        try:
            yield process_deps._current, cloud
        finally:
            process_deps.reset()


def deliver(handler: Handler, topic: str, data: bytes, message_id: str) -> None:
    """One delivery through the handler's Pub/Sub wrapper; raises as a 500 would."""
    handler(cloud_event(Published(message_id, topic, data, 0, datetime.now(UTC))))


def until_acknowledged(handler: Handler, topic: str, data: bytes, message_id: str) -> int:
    """Pub/Sub's redelivery: deliver until the handler returns; the failures."""
    for failures in range(10):
        try:
            deliver(handler, topic, data, message_id)
            return failures
        except Exception:
            time.sleep(0.5)
    raise AssertionError(f"{topic} {message_id} never acknowledged")


def spec(job_id: str, user: str) -> bytes:
    body = {"job_id": job_id, "user": user, "machine_ids": ["g2-standard-4"], "epochs": 2}
    return json.dumps({**body, "trainer": "digits_mlp"}).encode()


def booted(cloud: LocalCloud, job_id: str) -> bytes:
    """The VmBooted the agent of the job's first VM sends, with the event token
    its metadata holds (where placement wrote one)."""
    [vm] = [vm for vm in cloud.list() if vm["name"] == f"sl-{job_id}-a1"]
    token = vm["metadata"].get(EVENT_TOKEN_KEY)
    event = {
        "job_id": job_id,
        "attempt": 1,
        "instance": vm["name"],
        "zone": vm["zone"],
        "instance_id": str(vm["id"]),
        "sent_at": datetime.now(UTC).isoformat(),
        **({"token": token} if token else {}),
    }
    VmBooted.model_validate(event)
    return json.dumps(event).encode()


class InFlight(threading.Thread):
    """One delivery on its own thread: ``acked`` once the handler returned."""

    def __init__(self, handler: Handler, topic: str, data: bytes, message_id: str) -> None:
        super().__init__(daemon=True)
        self.args_ = (handler, topic, data, message_id)
        self.acked = False
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            deliver(*self.args_)
            self.acked = True
        except Exception as err:  # a 500: Pub/Sub would deliver it again
            self.error = err


def test_deliveries_held_by_a_frozen_firestore_ack_nothing_until_it_is_back(
    emulators: tuple[Emulator, Emulator],
    installed: tuple[Deps, LocalCloud],
    capsys: pytest.CaptureFixture[str],
) -> None:
    firestore, _ = emulators
    deps, cloud = installed
    deliver(submit_job, "submit", spec("f1", "alice"), "m1")

    # Frozen: f2's submission twice (its ack deadline passed, Pub/Sub sent it
    # again), f1's VM booted twice.
    flights = [
        InFlight(submit_job, "submit", spec("f2", "bob"), "m2"),
        InFlight(submit_job, "submit", spec("f2", "bob"), "m2"),
        InFlight(on_vm_booted, "vm_booted", booted(cloud, "f1"), "m3"),
        InFlight(on_vm_booted, "vm_booted", booted(cloud, "f1"), "m3"),
    ]
    firestore.freeze()
    try:
        for flight in flights:
            flight.start()
        time.sleep(FREEZE_S)
        acked_while_frozen = [flight.acked for flight in flights]
    finally:
        firestore.thaw()
    for flight in flights:
        flight.join(120)
    failed = [flight for flight in flights if flight.error is not None]
    for flight in failed:  # redelivered, as Pub/Sub does after a 500
        until_acknowledged(*flight.args_)
    with capsys.disabled():
        print(
            f"\nfirestore frozen {FREEZE_S:g} s: {len(flights)} deliveries held, "
            f"{len(failed)} failed and were redelivered"
        )

    assert acked_while_frozen == [False] * len(flights)
    assert all(flight.acked or flight.error for flight in flights)
    store = deps.store
    f1, f2 = store.get_job("f1"), store.get_job("f2")
    assert f1 is not None and f1.substatus == JobSubstatus.GEARING_UP_ENV
    assert f2 is not None and f2.substatus == JobSubstatus.CONNECTING_SERVER
    assert sorted(vm["name"] for vm in cloud.list()) == ["sl-f1-a1", "sl-f2-a1"]
    assert sorted(cloud.launcher.boots) == ["sl-f1-a1", "sl-f2-a1"]  # type: ignore[attr-defined]
    for user, job_id in (("alice", "f1"), ("bob", "f2")):
        slots = store.get_user(user)
        assert slots is not None
        assert (slots.active_jobs, slots.active_instances) == ([job_id], [f"sl-{job_id}-a1"])


def test_the_agent_gets_its_events_through_a_frozen_pubsub(
    emulators: tuple[Emulator, Emulator],
    topics: Topics,
    start_agent: Callable[..., RunningAgent],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The events wait for Pub/Sub, and the job runs meanwhile. Frozen past a
    publish's 30 s deadline (``make soak-deps``), VmBooted is given up, not
    the agent (it died of it before): every later event says when it booted."""
    _, pubsub = emulators
    for key in ("vm_booted", "epoch_done", "job_finished"):
        topics.create(key)
    pubsub.freeze()
    try:
        agent = start_agent([sys.executable, "-c", "print('done')"])
        time.sleep(FREEZE_S)
        still_running = agent.process.poll() is None
    finally:
        pubsub.thaw()

    assert still_running
    assert agent.wait(90) == 0, agent.log.read_text(errors="replace")[-3000:]
    received = {key: topics.pull(key, 5.0) for key in ("vm_booted", "job_finished")}
    got = {key: len(messages) for key, messages in received.items()}
    with capsys.disabled():
        print(f"\npubsub frozen {FREEZE_S:g} s under a running agent: received {got}")
    assert got["job_finished"] >= 1
    finished = JobFinished.model_validate_json(received["job_finished"][0])
    assert finished.exit_code == 0 and JobSubstatus.GEARING_UP_ENV in finished.phases
    if FREEZE_S < 20:
        assert got["vm_booted"] >= 1


def test_a_publish_that_timed_out_in_a_frozen_pubsub_is_harmless_when_retried(
    emulators: tuple[Emulator, Emulator], project: str, topics: Topics
) -> None:
    """It may have gone through: its retry makes a duplicate, never a loss."""
    _, pubsub = emulators
    topics.create("job_finished")
    bus = PubsubBus(project)
    bus.publish("job_finished", b'{"warm": 1}')
    topics.pull("job_finished", 2.0)
    pubsub.freeze()
    try:
        with pytest.raises(GoogleAPIError):
            bus.publish("job_finished", b'{"n": 1}', timeout_s=1.0)
    finally:
        pubsub.thaw()
    bus.publish("job_finished", b'{"n": 1}')

    copies = topics.pull("job_finished", 5.0)
    copies += topics.pull("job_finished", 1.0)
    assert 1 <= len(copies) <= 2 and set(copies) == {b'{"n": 1}'}


@pytest.mark.skipif(
    os.environ.get("SPOTLINE_DEPS_RESTART") != "1",
    reason="two emulator starts: SPOTLINE_DEPS_RESTART=1 (make soak-deps)",
)
def test_a_firestore_restarted_with_its_data_is_reached_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    emulator = start_firestore(tmp_path)
    project = "spotline-restart"
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulator.host)
    limits = {metric: 1e6 for metric in DEFAULT_LIMITS}
    try:
        emulator.wait_ready(120)
        with LocalCloud(project, RecordLauncher(), quota_limits=limits) as cloud:
            process_deps._current = deps = deps_on(project, cloud)
            try:
                deliver(submit_job, "submit", spec("r1", "alice"), "m1")
                event = booted(cloud, "r1")
                saved = export_firestore(emulator, project, tmp_path / "export")
                emulator.stop()
                started = time.monotonic()
                emulator = start_firestore(tmp_path, emulator.port, import_data=saved)
                emulator.wait_ready(120)
                # The same long-lived client, reconnecting.
                failures = until_acknowledged(on_vm_booted, "vm_booted", event, "m2")
                failures += until_acknowledged(submit_job, "submit", spec("r2", "bob"), "m3")
                took = time.monotonic() - started
            finally:
                process_deps.reset()
        with capsys.disabled():
            print(
                f"\nfirestore restarted with its data: {failures} failed deliveries, {took:.1f} s"
            )
        r1, r2 = deps.store.get_job("r1"), deps.store.get_job("r2")
        assert r1 is not None and r1.substatus == JobSubstatus.GEARING_UP_ENV
        assert r2 is not None and r2.substatus == JobSubstatus.CONNECTING_SERVER
        assert sorted(cloud.launcher.boots) == ["sl-r1-a1", "sl-r2-a1"]  # type: ignore[attr-defined]
    finally:
        emulator.stop()
