"""The real VM agent on odd trainers and a failing Pub/Sub: it reports what
happened and ends, never hangs and never dies silently.

The agent runs as on a VM (``python -m spotline.vm_image.agent``) against its own
metadata server and the Pub/Sub emulator; pull subscriptions show what it sent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spotline.infra.localcloud.metadata_server import Identity, MetadataServer
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.events import JobFinished
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.vms import JOB_METADATA_KEY
from spotline.shared.settings import TOPICS

pytestmark = pytest.mark.emulators
REPO = Path(__file__).resolve().parents[2]
INSTANCE = "sl-j1-a1"

# Bytes that are not UTF-8, then far more output than a pipe holds, then exit 3.
UNDECODABLE = r"""
import sys
out = sys.stdout.buffer
out.write(b"caf\xe9 \xff\xfe not utf-8\n")
for n in range(20000):
    out.write(b"line %d of the noise\n" % n)
out.write(b"last words\n")
out.flush()
sys.exit(3)
"""


class Topics:
    """The agent's topics in the test's project, each with a pull subscription."""

    def __init__(self, project: str, label: str = "agent-test") -> None:
        from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

        self.project = project
        self.label = label  # the subscriptions' names start with it
        self.publisher = PublisherClient()
        self.subscriber = SubscriberClient()

    def create(self, key: str, name: str | None = None) -> None:
        """The topic of ``key`` (named ``name``, e.g. a user's own, or the
        shared one), and a pull subscription on it."""
        topic = self.publisher.topic_path(self.project, name or TOPICS[key])
        self.publisher.create_topic(name=topic)
        self.subscriber.create_subscription(name=self._subscription(key), topic=topic)

    def _subscription(self, key: str) -> str:
        return self.subscriber.subscription_path(self.project, f"{self.label}-{key}")

    def pull(self, key: str, wait_s: float) -> list[bytes]:
        """Every message on ``key`` that arrives within ``wait_s`` (at least one
        pull), acknowledged."""
        from google.api_core.exceptions import DeadlineExceeded

        found: list[bytes] = []
        deadline = time.monotonic() + wait_s
        while not found and (remaining := deadline - time.monotonic()) > 0:
            try:
                response = self.subscriber.pull(
                    subscription=self._subscription(key),
                    max_messages=10,
                    timeout=max(remaining, 0.1),
                )
            except DeadlineExceeded:
                break
            if not response.received_messages:
                time.sleep(0.1)
                continue
            found += [received.message.data for received in response.received_messages]
            self.subscriber.acknowledge(
                subscription=self._subscription(key),
                ack_ids=[received.ack_id for received in response.received_messages],
            )
        return found

    def close(self) -> None:
        self.subscriber.close()


@pytest.fixture
def topics(project: str) -> Iterator[Topics]:
    topics = Topics(project)
    yield topics
    topics.close()


class RunningAgent:
    """The agent process of one VM, its output in ``log``."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def wait(self, timeout_s: float) -> int | None:
        """The agent's exit status, or None when it is still running after
        ``timeout_s`` (it is then killed, with the trainer in its group)."""
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # its own group: agent and trainer
            self.process.wait(10)

    def lines(self) -> list[dict[str, object]]:
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return found

    def said(self, severity: str, text: str) -> bool:
        return any(
            line.get("severity") == severity and text in str(line.get("message"))
            for line in self.lines()
        )


@pytest.fixture
def start_agent(project: str, tmp_path: Path) -> Iterator[Callable[..., RunningAgent]]:
    servers: list[MetadataServer] = []
    agents: list[RunningAgent] = []

    def start(command: list[str], **env: str) -> RunningAgent:
        spec = JobSpec(
            user="alice", machine_ids=["g2-standard-4"], framework="command", command=command
        )
        assignment = Assignment(
            job_id="j1",
            attempt=1,
            project=project,
            spec=spec,
            checkpoint_dir=tmp_path.joinpath("ckpt").as_uri(),
            output_dir=tmp_path.joinpath("out").as_uri(),
            heartbeat_s=0.5,
        )
        identity = Identity(
            INSTANCE, "1234567890123456789", "us-central1-a", "g2-standard-4", project, "42"
        )
        server = MetadataServer(identity, {JOB_METADATA_KEY: assignment.model_dump_json()})
        server.start()
        servers.append(server)
        log = tmp_path / "agent.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "spotline.vm_image.agent"],
            cwd=REPO,
            env={
                **os.environ,
                "PYTHONPATH": str(REPO),
                "GCE_METADATA_HOST": server.host,
                "SPOTLINE_WORKDIR": str(tmp_path / "vm"),
                **env,
            },
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        agents.append(RunningAgent(process, log))
        return agents[-1]

    yield start
    for agent in agents:
        agent.kill()
    for server in servers:
        server.close()


def finished(topics: Topics, wait_s: float = 5.0) -> JobFinished:
    messages = topics.pull("job_finished", wait_s)
    assert len(messages) == 1, messages
    return JobFinished.model_validate_json(messages[0])


def test_a_trainer_printing_bytes_that_are_not_utf8_is_reported(
    topics: Topics, start_agent: Callable[..., RunningAgent]
) -> None:
    for key in ("vm_booted", "epoch_done", "job_finished"):
        topics.create(key)
    agent = start_agent([sys.executable, "-c", UNDECODABLE])

    assert agent.wait(60) == 0, agent.log.read_text(errors="replace")[-3000:]
    event = finished(topics)
    assert event.exit_code == 3
    assert event.log_tail.endswith("line 19999 of the noise\nlast words\n")
    assert len(event.log_tail) <= 2000


def test_a_missing_program_is_reported_as_the_jobs_failure(
    topics: Topics, start_agent: Callable[..., RunningAgent]
) -> None:
    for key in ("vm_booted", "epoch_done", "job_finished"):
        topics.create(key)
    agent = start_agent(["no-such-trainer-binary", "--epochs", "3"])

    assert agent.wait(60) == 0, agent.log.read_text(errors="replace")[-3000:]
    event = finished(topics)
    assert event.exit_code == 127
    assert "cannot start the trainer 'no-such-trainer-binary'" in event.log_tail


def test_a_trainer_killed_by_a_signal_is_reported_as_a_shell_reports_it(
    topics: Topics, start_agent: Callable[..., RunningAgent]
) -> None:
    """An abort (a flaky NCCL error) kills the trainer with SIGABRT: Python's
    return code is -6, which no ``restart_on_exit_codes`` (1-255) could name."""
    for key in ("vm_booted", "epoch_done", "job_finished"):
        topics.create(key)
    agent = start_agent([sys.executable, "-c", "import os; os.abort()"])

    assert agent.wait(60) == 0, agent.log.read_text(errors="replace")[-3000:]
    event = finished(topics)
    assert event.exit_code == 128 + signal.SIGABRT == 134


def test_job_finished_is_retried_until_pubsub_takes_it(
    topics: Topics, start_agent: Callable[..., RunningAgent]
) -> None:
    # Its topic is missing (NotFound, which Pub/Sub's client does not retry)
    # until the agent has failed to publish at least once.
    topics.create("vm_booted")
    topics.create("epoch_done")
    agent = start_agent([sys.executable, "-c", "print('done')"])
    deadline = time.monotonic() + 60
    while not agent.said("WARNING", "job finished") and time.monotonic() < deadline:
        if agent.process.poll() is not None:
            break
        time.sleep(0.05)
    topics.create("job_finished")

    assert agent.wait(60) == 0, agent.log.read_text(errors="replace")[-3000:]
    event = finished(topics)
    assert event.exit_code == 0 and event.log_tail == "done\n"


def test_a_job_finished_that_cannot_be_published_ends_the_agent(
    topics: Topics, start_agent: Callable[..., RunningAgent]
) -> None:
    topics.create("vm_booted")
    topics.create("epoch_done")
    agent = start_agent([sys.executable, "-c", "print('done')"], SPOTLINE_FINISH_PUBLISH_S="3")

    # It exits (locally the VM is then TERMINATED; on Compute Engine the unit's
    # FailureAction powers it off), saying loudly that spotline was not told.
    started = time.monotonic()
    assert agent.wait(60) == 1, agent.log.read_text(errors="replace")[-3000:]
    assert time.monotonic() - started < 30
    assert agent.said("ERROR", "job finished")


def test_a_notice_after_a_trainer_exited_0_does_not_hide_that_it_completed() -> None:
    """Found by the finish-vs-preempt work: the notice came after the trainer
    exited 0 but before the agent looked, and the agent sent SpotPreempted
    instead of JobFinished, so a completed job ran again."""
    from spotline.vm_image.agent.agent import preempted_run

    assert not preempted_run(0, None, exited_at=10.0)  # no notice: it finished
    assert not preempted_run(0, 10.5, exited_at=10.0)  # notice after a clean exit: finished
    assert preempted_run(143, 9.0, exited_at=10.0)  # SIGTERM'd by the notice: preempted
    assert preempted_run(0, 9.0, exited_at=10.0)  # exited 0 on the notice's SIGTERM: preempted
    assert preempted_run(
        1, 10.5, exited_at=10.0
    )  # failed, then the VM went: the next attempt decides
