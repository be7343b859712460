"""The shutdown-script fallback, run as the shutdown script runs it.

The module runs in a subprocess against a real per-VM metadata server and the
Pub/Sub emulator; a pull subscription on spot-preempted shows what it sent.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotline.infra.localcloud.metadata_server import Identity, MetadataServer
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.events import SpotPreempted
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.vms import EVENT_TOKEN_METADATA_KEY, JOB_METADATA_KEY
from spotline.shared.settings import TOPICS
from spotline.shared.topics import user_topic, vm_topics_for
from spotline.vm_image.agent.metadata import Metadata
from spotline.vm_image.agent.shutdown_notice import NoticeError, publish, report

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "vm_image" / "scripts"
INSTANCE = "sl-j1-a3"
TOKEN = "an-event-token-of-attempt-3"


def _assignment(
    project: str, checkpoint_dir: str, topics: dict[str, str] | None = None
) -> Assignment:
    spec = JobSpec(user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp")
    return Assignment(
        job_id="j1",
        attempt=3,
        project=project,
        spec=spec,
        checkpoint_dir=checkpoint_dir,
        output_dir="file:///nowhere",
        topics=topics or {},
    )


def _metadata_server(assignment: Assignment) -> MetadataServer:
    identity = Identity(
        INSTANCE, "1234567890123456789", "us-central1-a", "g2-standard-4", assignment.project, "42"
    )
    attributes = {JOB_METADATA_KEY: assignment.model_dump_json(), EVENT_TOKEN_METADATA_KEY: TOKEN}
    server = MetadataServer(identity, attributes)
    server.start()
    return server


def _save_checkpoints(checkpoint_dir: str, steps: list[int]) -> list[str]:
    import torch

    from spotline.torch import save_checkpoint

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return [
        save_checkpoint(
            checkpoint_dir,
            model=model,
            optimizer=optimizer,
            epoch=0,
            step=step,
            step_in_epoch=step,
            keep=len(steps),
        )
        for step in steps
    ]


class Subscription:
    """A pull subscription on spot-preempted in the test's project."""

    def __init__(self, project: str, topic_name: str = TOPICS["spot_preempted"]) -> None:
        from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

        self.publisher = PublisherClient()
        self.subscriber = SubscriberClient()
        topic = self.publisher.topic_path(project, topic_name)
        self.publisher.create_topic(name=topic)
        self.path = self.subscriber.subscription_path(project, f"notice-test-{topic_name}")
        self.subscriber.create_subscription(name=self.path, topic=topic)

    def pull(self, wait_s: float) -> list[SpotPreempted]:
        """Every message that arrives within ``wait_s``, acknowledged."""
        from google.api_core.exceptions import DeadlineExceeded

        events: list[SpotPreempted] = []
        deadline = time.monotonic() + wait_s
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                response = self.subscriber.pull(
                    subscription=self.path, max_messages=10, timeout=max(remaining, 0.1)
                )
            except DeadlineExceeded:
                break
            if not response.received_messages:
                time.sleep(0.1)
                continue
            events += [
                SpotPreempted.model_validate_json(received.message.data)
                for received in response.received_messages
            ]
            self.subscriber.acknowledge(
                subscription=self.path,
                ack_ids=[received.ack_id for received in response.received_messages],
            )
        return events

    def close(self) -> None:
        self.subscriber.close()


@pytest.fixture
def subscription(project: str) -> Iterator[Subscription]:
    subscription = Subscription(project)
    yield subscription
    subscription.close()


def _save_keras_state(checkpoint_dir: Path) -> None:
    """The files Keras' BackupAndRestore (double_checkpoint=True) leaves after
    two epochs, as the Keras callbacks keep them; no TensorFlow needed to fake them."""
    checkpoint_dir.mkdir(parents=True)
    for prefix, epoch in (("_", 1), ("", 2)):
        (checkpoint_dir / f"{prefix}latest.weights.h5").write_bytes(b"\x89HDF\r\n\x1a\n")
        (checkpoint_dir / f"{prefix}training_metadata.json").write_text(
            f'{{"epoch": {epoch}, "batch": 0}}'
        )


def _run_notice(server: MetadataServer, *python_options: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GCE_METADATA_HOST": server.host}
    return subprocess.run(
        [sys.executable, *python_options, "-m", "spotline.vm_image.agent.shutdown_notice"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.emulators
def test_an_ordinary_shutdown_publishes_nothing(
    project: str, subscription: Subscription, tmp_path: Path
) -> None:
    checkpoint_dir = tmp_path.as_uri()
    _save_checkpoints(checkpoint_dir, [5])
    server = _metadata_server(_assignment(project, checkpoint_dir))
    try:
        done = _run_notice(server)
    finally:
        server.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not preempted" in done.stdout
    assert subscription.pull(wait_s=1.5) == []


def _preempted_notice(
    project: str, subscription: Subscription, checkpoint_uri: str, *python_args: str
) -> tuple[subprocess.CompletedProcess[str], SpotPreempted]:
    """Run the notice on a preempted VM; what it printed and the one event it sent."""
    server = _metadata_server(_assignment(project, checkpoint_uri))
    server.set_preempted()
    try:
        done = _run_notice(server, *python_args)
    finally:
        server.close()
    assert done.returncode == 0, done.stdout + done.stderr
    events = subscription.pull(wait_s=2.0)
    assert len(events) == 1, events
    return done, events[0]


@pytest.mark.emulators
def test_a_preemption_publishes_the_newest_checkpoint(
    project: str, subscription: Subscription, tmp_path: Path
) -> None:
    checkpoint_dir = tmp_path.joinpath("ckpt").as_uri()
    uris = _save_checkpoints(checkpoint_dir, [40, 120])
    _, event = _preempted_notice(project, subscription, checkpoint_dir)
    assert (event.job_id, event.attempt, event.instance) == ("j1", 3, INSTANCE)
    assert event.token == TOKEN  # the attempt's event token, from the metadata
    assert event.checkpoint_uri == uris[-1]
    assert event.checkpoint_uri.endswith("/ckpt-000000000120.pt")
    assert event.step == 120


@pytest.mark.emulators
def test_in_the_per_user_mode_the_notice_goes_to_the_users_own_topic(
    project: str, subscription: Subscription, tmp_path: Path
) -> None:
    """Its account may publish there only; the shared topic gets nothing."""
    own = Subscription(project, user_topic("spot_preempted", "alice"))
    topics = vm_topics_for("alice", ("alice", "bob"))
    server = _metadata_server(_assignment(project, tmp_path.as_uri(), topics))
    server.set_preempted()
    try:
        done = _run_notice(server)
        assert done.returncode == 0, done.stdout + done.stderr
        [event] = own.pull(wait_s=2.0)
        assert (event.job_id, event.token) == ("j1", TOKEN)
        assert subscription.pull(wait_s=0.5) == []
    finally:
        server.close()
        own.close()


@pytest.mark.emulators
def test_a_preemption_publishes_the_newest_checkpoint_in_the_bucket(
    project: str, subscription: Subscription, gcs: str
) -> None:
    # As on a VM: the trainer saved into gs://, the shutdown script lists it
    # through gcsfs (in its own process, pointed at the storage emulator).
    checkpoint_dir = f"{gcs}/jobs/j1/checkpoints"
    uris = _save_checkpoints(checkpoint_dir, [40, 120])
    done, event = _preempted_notice(project, subscription, checkpoint_dir, "-X", "importtime")
    assert event.checkpoint_uri == uris[-1] == f"{checkpoint_dir}/ckpt-000000000120.pt"
    assert event.step == 120
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "gcsfs.core" in imported and not any(name.startswith("torch") for name in imported)


@pytest.mark.emulators
def test_a_preemption_in_an_empty_bucket_folder_still_publishes(
    project: str, subscription: Subscription, gcs: str
) -> None:
    _, event = _preempted_notice(project, subscription, f"{gcs}/jobs/j1/checkpoints")
    assert (event.checkpoint_uri, event.step) == (None, None)


@pytest.mark.emulators
def test_a_preemption_publishes_the_keras_state_without_importing_a_framework(
    project: str, subscription: Subscription, tmp_path: Path
) -> None:
    checkpoint_dir = tmp_path / "keras"
    _save_keras_state(checkpoint_dir)
    done, event = _preempted_notice(
        project, subscription, checkpoint_dir.as_uri(), "-X", "importtime"
    )
    # The URL the Keras callbacks report for the same state; its name holds no step.
    assert event.checkpoint_uri == (checkpoint_dir / "latest.weights.h5").as_uri()
    assert event.step is None
    # -X importtime lists every module imported: "import time: self | cumulative | name".
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    heavy = {name for name in imported if name.split(".")[0] in {"torch", "tensorflow", "keras"}}
    assert not heavy, f"the shutdown notice imported {sorted(heavy)}"


@pytest.mark.emulators
def test_a_preemption_without_a_checkpoint_still_publishes(
    project: str, subscription: Subscription, tmp_path: Path
) -> None:
    none_yet = tmp_path.joinpath("none-yet").as_uri()
    _, event = _preempted_notice(project, subscription, none_yet)
    assert (event.job_id, event.attempt, event.instance) == ("j1", 3, INSTANCE)
    assert event.checkpoint_uri is None
    assert event.step is None


@pytest.fixture
def silent_host() -> Iterator[str]:
    """HOST:PORT of a socket that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def test_a_silent_metadata_server_fails_within_the_timeout(silent_host: str) -> None:
    started = time.monotonic()
    assert report(Metadata(silent_host, timeout_s=0.5), started + 5.0) == 1
    assert time.monotonic() - started < 3.0


@pytest.mark.slow
def test_an_unreachable_pubsub_fails_within_the_timeout(
    silent_host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime

    from spotline.shared.adapters.pubsub_bus import PubsubBus

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", silent_host)
    event = SpotPreempted(job_id="j1", attempt=3, instance=INSTANCE, sent_at=datetime.now(UTC))
    started = time.monotonic()
    with pytest.raises(NoticeError):
        publish(PubsubBus("p"), event, timeout_s=1.0)
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize("script", ["shutdown.sh", "startup.sh"])
def test_the_instance_scripts_parse(script: str) -> None:
    done = subprocess.run(
        ["bash", "-n", str(SCRIPTS / script)], capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 0, done.stderr
