"""Shared fixtures: the real emulators, started once per test session.

Each test gets its own project id, which the emulators keep apart, so tests
never see each other's documents or topics.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import functions_framework
import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.discovery import Violation, clear_violations
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.infra.localstack.emulators import (
    Emulator,
    emulators_available,
    start_firestore,
    start_pubsub,
)
from spotline.infra.localstack.stack import LocalStack, StackOptions
from spotline.infra.localstack.storage import (
    StorageEmulator,
    reload_fsspec_config,
    storage_emulator_missing,
)
from spotline.shared.topics import TOPICS
from tests.event_tokens import token_for
from tests.pubsub_events import post
from tests.wire_contract import broken_contract

# gcsfs reads this once, when first imported (whichever test module does it
# first): without it, every gs:// call asks the gRPC Storage Control API about
# the bucket, which the storage emulator does not serve, and backs off for
# minutes. The stacks' client_env sets it too, for the processes they start.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
# The agents these tests start run as root here (and in CI), where a VM's
# agent would start its trainer as spotline-trainer, an account this machine
# lacks: they run it as themselves, as the local stack does. The tests of the
# switch (test_trainer_account.py) name an account of their own.
os.environ.setdefault("SPOTLINE_TRAINER_USER", "")
_MISSING = emulators_available()
_NO_STORAGE = storage_emulator_missing()
# The Compute Engine client against the local cloud: `cloud`, `compute`.
pytest_plugins = [
    "tests.local_cloud",
    "tests.vm_agent",
    "tests.deploy_cli",
    "tests.container_stand_in",
]


# Tests live in a folder of their kind, lightest first; the folder gives its
# markers, which `-m` selects on. `make test-fast` runs tests/unit.
_KINDS = ("unit", "slow", "frameworks", "emulators", "e2e")
_FOLDER_MARKERS = {
    "unit": (),
    "slow": ("slow",),
    "frameworks": ("frameworks",),
    "emulators": ("emulators",),
    "e2e": ("emulators", "e2e"),
}
# A test also gets markers from what it uses, whatever its folder or file says:
# a test whose fixtures start an emulator is an emulator test, one on the whole
# local stack is end to end. This is all a test file left in tests/ itself gets.
_EMULATOR_FIXTURES = frozenset({"emulators", "storage_emulator", "shared_stack"})
_E2E_FIXTURES = frozenset({"shared_stack"})
_TESTS = Path(__file__).resolve().parent


def _needs(item: pytest.Item) -> tuple[str, str]:
    """The lightest kind whose folder may hold this test, and why."""
    used = set(getattr(item, "fixturenames", ()))
    marks = {mark.name for mark in item.iter_markers()}
    for kind, fixtures in (("e2e", _E2E_FIXTURES), ("emulators", _EMULATOR_FIXTURES)):
        if used & fixtures:
            return kind, f"fixture {', '.join(sorted(used & fixtures))}"
        if kind in marks:
            return kind, f"marker {kind}"
    kind = next((kind for kind in ("frameworks", "slow") if kind in marks), "unit")
    return kind, f"marker {kind}"


def _folder(item: pytest.Item) -> str | None:
    parts = item.path.resolve().relative_to(_TESTS).parts
    return parts[0] if len(parts) > 1 and parts[0] in _FOLDER_MARKERS else None


_LOOSE = pytest.StashKey[list[str]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    misplaced = []
    for item in items:
        (needs, why), folder = _needs(item), _folder(item)
        if folder is not None and _KINDS.index(needs) > _KINDS.index(folder):
            misplaced.append(f"  {item.nodeid} ({why}): move its file to tests/{needs}/")
        for name in {*_FOLDER_MARKERS[needs], *_FOLDER_MARKERS[folder or "unit"]}:
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
    if misplaced:
        raise pytest.UsageError(
            "tests in a folder lighter than what they use: a file goes to the folder "
            "of its heaviest test (e2e > emulators > frameworks > slow > unit), or "
            "split in two; tests/unit is what `make test-fast` runs, with no "
            "emulator, local stack, framework or wait:\n" + "\n".join(misplaced)
        )
    config.stash[_LOOSE] = sorted({item.path.name for item in items if _folder(item) is None})


def pytest_report_header() -> list[str]:
    lines = ["emulators: Firestore and Pub/Sub from the Google Cloud CLI"]
    if _MISSING:
        lines = [f"!!! EMULATOR TESTS WILL BE SKIPPED: {_MISSING} !!!"]
    if _NO_STORAGE:
        lines.append(f"!!! STORAGE AND E2E TESTS WILL BE SKIPPED: {_NO_STORAGE} !!!")
    return lines


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    loose = config.stash.get(_LOOSE, [])
    if loose:
        terminalreporter.write_line(
            f"!!! {len(loose)} test files in tests/ itself, marked by their fixtures only and "
            f"left out of `make test-fast`: move each to tests/unit, slow, frameworks, "
            f"emulators or e2e: {', '.join(loose)} !!!",
            yellow=True,
            bold=True,
        )
    fuzz = sys.modules.get("tests.slow.test_fuzz_events")
    line = fuzz.summary() if fuzz is not None else None
    if line:
        terminalreporter.write_line(line, bold=True)
    if _MISSING:
        terminalreporter.write_line(
            f"!!! EMULATOR TESTS WERE SKIPPED: {_MISSING} !!!", red=True, bold=True
        )
    if _NO_STORAGE:
        terminalreporter.write_line(
            f"!!! STORAGE AND E2E TESTS WERE SKIPPED: {_NO_STORAGE} !!!", red=True, bold=True
        )


@pytest.fixture(scope="session")
def emulators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Emulator, Emulator]]:
    if _MISSING:
        print(f"\n!!! SKIPPING EMULATOR TESTS: {_MISSING} !!!", file=sys.stderr)
        pytest.skip(f"emulators unavailable: {_MISSING}")
    logs = tmp_path_factory.mktemp("emulator-logs")
    firestore = start_firestore(logs)
    pubsub = start_pubsub(logs, "spotline-test")
    try:
        firestore.wait_ready()
        pubsub.wait_ready()
        yield firestore, pubsub
    finally:
        pubsub.stop()
        firestore.stop()


@pytest.fixture(scope="session")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The whole system, once per session, with short timeouts for chaos tests.

    It runs until the session ends, so it leaves none of its variables in this
    process's environment (a cloud test after an e2e module would take its
    compute endpoint for its own): ``local_stack`` sets them for each test
    that drives it.
    """
    if _MISSING or _NO_STORAGE:
        pytest.skip(f"emulators unavailable: {_MISSING or _NO_STORAGE}")
    options = StackOptions(
        project="spotline-e2e",
        tick_s=1.0,
        heartbeat_s=0.5,
        stall_timeout_s=8.0,
        boot_timeout_s=60.0,
        request_timeout_s=10.0,
    )
    with LocalStack(tmp_path_factory.mktemp("stack"), options) as stack:
        stack.restore_env()
        yield stack


@pytest.fixture
def local_stack(shared_stack: LocalStack) -> Iterator[LocalStack]:
    """The session's stack, with this process pointed at it for the test only."""
    with shared_stack.environment():
        yield shared_stack


@pytest.fixture(scope="session")
def storage_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StorageEmulator]:
    """The Cloud Storage emulator, once per session, with its bucket."""
    if _NO_STORAGE:
        pytest.skip(_NO_STORAGE)
    folder = tmp_path_factory.mktemp("storage-emulator")
    emulator = StorageEmulator(folder / "data", folder / "storage-emulator.log")
    try:
        emulator.wait_ready()
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def gcs(storage_emulator: StorageEmulator) -> Iterator[str]:
    """A fresh gs:// folder in the emulator's bucket, with this process (and the
    processes it starts) pointed at the emulator as the local stack points a VM."""
    env = storage_emulator.client_env()
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    reload_fsspec_config()
    try:
        yield f"{storage_emulator.root}/test-{uuid.uuid4().hex[:10]}"
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        reload_fsspec_config()


@pytest.fixture
def project(emulators: tuple[Emulator, Emulator], monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh project id on the emulators, set in the environment."""
    firestore, pubsub = emulators
    name = f"test-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore.host)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub.host)
    monkeypatch.setenv("SPOTLINE_PROJECT", name)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", name)
    return name


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_user_config(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads or writes the real home's CLI config: each gets its own place
    (for the processes it starts too), empty until a test writes there."""
    home = tmp_path_factory.mktemp("config-home")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.setenv("SPOTLINE_CONFIG", str(home / "spotline" / "config.json"))


@pytest.fixture(autouse=True)
def _wire_contract(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test any of whose requests to a local Google API broke the API's
    discovery document, unless it sent them on purpose (``wire_violations``)."""
    clear_violations()
    yield
    seen = clear_violations()
    failure = broken_contract(seen)
    if failure is not None and "wire_violations" not in request.fixturenames:
        pytest.fail(failure)


@pytest.fixture
def wire_violations() -> Callable[[], list[Violation]]:
    """For a test that breaks the contract on purpose: the violations so far."""
    from spotline.infra.localcloud.discovery import violations

    return violations


@pytest.fixture(autouse=True)
def _no_leaked_env() -> Iterator[None]:
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


# -- handlers through the functions framework, with VMs that only sleep --

SPEC = {
    "user": "alice",
    "machine_ids": ["g2-standard-4", "n1-standard-8-t4.od"],
    "trainer": "digits_mlp",
    "epochs": 3,
    "job_id": "job1",
}


# The running test's `host`: vm_event reads its VMs' event tokens there.
_HOSTS: list[LocalCloud] = []


@pytest.fixture
def host(project: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCloud]:
    """The local cloud (VMs are records, no processes), reached by the handlers
    through GceCompute on its REST routes."""
    with LocalCloud(project, RecordLauncher()) as cloud:
        monkeypatch.setenv("SPOTLINE_COMPUTE_ENDPOINT", cloud.endpoint)
        monkeypatch.setenv("SPOTLINE_ZONES", "us-central1-a,us-central1-b")
        monkeypatch.setenv("SPOTLINE_STORAGE_ROOT", f"file://{tmp_path}/storage")
        deps.reset()
        _HOSTS.append(cloud)
        try:
            yield cloud
        finally:
            _HOSTS.remove(cloud)
            deps.reset()


@pytest.fixture
def call(host: LocalCloud, project: str, repo_root: Path) -> Callable[..., Any]:
    """Deliver a message to a function through the functions framework. A
    reaper tick's pages, published on the emulator's page topic, are then
    pulled and delivered to ``reaper_page``, as the deployed topology would."""
    clients: dict[str, Any] = {}
    pages = PagePull(project)

    def send(
        target: str,
        topic_key: str,
        payload: Any,
        message_id: str = "1",
        mode: str = "push",
        **kw: Any,
    ) -> Any:
        if target not in clients:
            app = functions_framework.create_app(
                target=target,
                source=str(repo_root / "functions" / "main.py"),
                signature_type="cloudevent",
            )
            clients[target] = app.test_client()
        if target == "reaper":
            pages.subscribe()
        response = post(clients[target], project, topic_key, payload, message_id, mode, **kw)
        if target == "reaper":
            for page_id, data in pages.pull():
                send("reaper_page", "reaper_page", data, message_id=page_id)
        return response

    return send


class PagePull:
    """A pull subscription on the project's reaper page topic (emulator)."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.subscription: str | None = None

    def subscribe(self) -> None:
        if self.subscription is not None:
            return
        from google.api_core.exceptions import AlreadyExists
        from google.cloud import pubsub_v1

        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        topic = publisher.topic_path(self.project, TOPICS["reaper_page"])
        subscription = subscriber.subscription_path(self.project, "test-reaper-pages")
        for create in (
            lambda: publisher.create_topic(name=topic),
            lambda: subscriber.create_subscription(name=subscription, topic=topic),
        ):
            with contextlib.suppress(AlreadyExists):
                create()
        self.subscription = subscription

    def pull(self) -> list[tuple[str, bytes]]:
        from google.cloud import pubsub_v1

        # The tick published before it answered: nothing is on its way.
        assert self.subscription is not None
        messages = drained(pubsub_v1.SubscriberClient(), self.subscription)
        return [(m.message_id, m.data) for m in messages]


def drained(subscriber: Any, subscription: str) -> list[Any]:
    """Every message waiting on the emulator's ``subscription`` now (each
    acknowledged), in the order pulled: what was published before a
    handler answered is there."""
    found: list[Any] = []
    while True:
        answer = subscriber.pull(
            request={"subscription": subscription, "max_messages": 100, "return_immediately": True},
            timeout=10,
        )
        if not answer.received_messages:
            return found
        subscriber.acknowledge(
            subscription=subscription, ack_ids=[m.ack_id for m in answer.received_messages]
        )
        found += [m.message for m in answer.received_messages]


def vm_event(cls: type, **fields: Any) -> Any:
    """A VM event as the agent of the attempt's VM sends it: with the event
    token the functions handed that VM (else that attempt's VMs) in the
    running test's local cloud (none if no VM of it was ever made there),
    unless ``token`` is given."""
    base = {"job_id": "job1", "attempt": 1, "instance": "sl-job1-a1", "sent_at": datetime.now(UTC)}
    event = {**base, **fields}
    if "token" not in event and _HOSTS:
        event["token"] = token_for(_HOSTS[-1], event["job_id"], event["attempt"], event["instance"])
    return cls(**event)


def submit_concurrently(
    host: LocalCloud, project: str, repo_root: Path, specs: list[dict[str, Any]]
) -> int:
    """Deliver every spec to submit_job at once, a thread each, through the real
    functions framework; returns the most VMs the host held at any 10 ms sample."""
    app = functions_framework.create_app(
        target="submit_job",
        source=str(repo_root / "functions" / "main.py"),
        signature_type="cloudevent",
    )
    most_vms, statuses, stop = [0], [], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            most_vms[0] = max(most_vms[0], len(host.list()))
            stop.wait(0.01)

    def submit(n: int) -> None:
        statuses.append(post(app.test_client(), project, "submit", specs[n], f"m{n}").status_code)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=submit, args=(n,)) for n in range(len(specs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    watcher.join()
    assert statuses == [200] * len(specs)
    return max(most_vms[0], len(host.list()))
