"""One VM's real agent (``python -m spotline.vm_image.agent``) against its own metadata
server and the Pub/Sub emulator, for tests that choose its job's spec, its
workdir and its environment, and hand it a next job as spotline does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotline.infra.localcloud.metadata_server import Identity, MetadataServer
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.events import JobFinished
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.vms import JOB_METADATA_KEY
from tests.emulators.test_agent_failures import RunningAgent, Topics
from tests.spare_account import nobody_must_be_idle

REPO = Path(__file__).resolve().parent.parent
INSTANCE = "sl-j1-a1"


class Vm:
    """Boots the agent once; ``assign`` changes its job as the submit function
    does on a cooling VM (new metadata)."""

    def __init__(self, project: str, tmp_path: Path) -> None:
        self.project = project
        self.tmp_path = tmp_path
        # Reachable by any account (pytest's tmp_path is root's, 0700): the
        # trainer's account must get to its folder under it.
        self.workdir = Path(tempfile.mkdtemp(prefix="spotline-test-vm-"))
        self.workdir.chmod(0o755)
        self.identity = Identity(
            INSTANCE, "1234567890123456789", "us-central1-a", "g2-standard-4", project, "42"
        )
        self.server: MetadataServer | None = None
        self.agent: RunningAgent | None = None

    def assignment(
        self,
        job_id: str,
        command: list[str],
        topics: dict[str, str] | None = None,
        **spec: Any,
    ) -> str:
        fields = {"user": "alice", "machine_ids": ["g2-standard-4"], "framework": "command"}
        return Assignment(
            job_id=job_id,
            attempt=1,
            project=self.project,
            spec=JobSpec.model_validate({**fields, "command": command, **spec}),
            checkpoint_dir=self.tmp_path.joinpath(job_id, "ckpt").as_uri(),
            output_dir=self.tmp_path.joinpath(job_id, "out").as_uri(),
            heartbeat_s=0.5,
            topics=topics or {},
        ).model_dump_json()

    def gang_node(
        self,
        command: list[str],
        names: list[str],
        *,
        master_port: int = 29500,
        generation: int = 0,
        **spec: Any,
    ) -> str:
        """Node 0 (this VM) of a ``command`` gang of the VMs ``names``, every
        host on loopback, at its regroup ``generation``; ``spec``: the job's
        other fields."""
        fields = {"user": "alice", "machine_ids": ["g2-standard-4"], "framework": "command"}
        return Assignment(
            job_id="j1",
            attempt=1,
            project=self.project,
            spec=JobSpec.model_validate({**fields, "command": command, **spec}),
            checkpoint_dir=self.tmp_path.joinpath("ckpt").as_uri(),
            output_dir=self.tmp_path.joinpath("out").as_uri(),
            heartbeat_s=0.5,
            nodes=names,
            hosts=["127.0.0.1"] * len(names),
            master_port=master_port,
            generation=generation,
        ).model_dump_json()

    def boot(self, assignment: str, **env: str) -> RunningAgent:
        if env.get("SPOTLINE_TRAINER_USER") == "nobody":
            nobody_must_be_idle()
        self.server = MetadataServer(self.identity, {JOB_METADATA_KEY: assignment})
        self.server.start()
        log = self.tmp_path / "agent.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "spotline.vm_image.agent"],
            cwd=REPO,
            env={
                **os.environ,
                "PYTHONPATH": str(REPO),
                "GCE_METADATA_HOST": self.server.host,
                "SPOTLINE_WORKDIR": str(self.workdir),
                **env,
            },
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.agent = RunningAgent(process, log)
        return self.agent

    def assign(self, assignment: str) -> None:
        assert self.server is not None
        self.server.set_attributes({JOB_METADATA_KEY: assignment})

    def close(self) -> None:
        if self.agent is not None:
            self.agent.kill()
        if self.server is not None:
            self.server.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


@pytest.fixture
def vm(project: str, tmp_path: Path) -> Iterator[Vm]:
    machine = Vm(project, tmp_path)
    yield machine
    machine.close()


@pytest.fixture
def agent_topics(project: str) -> Iterator[Topics]:
    """The agent's topics, each with a pull subscription."""
    topics = Topics(project)
    for key in ("vm_booted", "epoch_done", "job_finished"):
        topics.create(key)
    yield topics
    topics.close()


def wait_started(agent: RunningAgent, marker: Path, timeout_s: float = 120.0) -> None:
    """Until the trainer has written ``marker``; fails at once, with the
    agent's log, if the agent exits first."""
    deadline = time.monotonic() + timeout_s
    while not marker.exists():
        assert agent.process.poll() is None, agent.log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"the trainer did not start in {timeout_s} s"
        time.sleep(0.2)


def next_finished(topics: Topics, wait_s: float = 60.0) -> JobFinished:
    (message,) = topics.pull("job_finished", wait_s)
    return JobFinished.model_validate_json(message)


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("switching the trainer to another account needs root (id -u is not 0)")
