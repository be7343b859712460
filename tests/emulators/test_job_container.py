"""A job with an ``image``: the agent runs its command through the container
runtime, and its contract (reports through the events file, the preemption
notice as SIGTERM, heartbeats) is the same as without one.

This machine runs no container daemon: the runtime is the setting
``SPOTLINE_CONTAINER_RUNTIME``, here a stand-in (``tests.container_stand_in``)
that checks the argv it is given and runs the command apart from the client
as docker's daemon would, so the agent's SIGTERM reaches it only as docker
passes it on. Real containers are not exercised here.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from spotline.shared.contract.events import EpochDone, SpotPreempted
from tests.container_stand_in import IMAGE, StandIn
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import Vm, next_finished

pytestmark = pytest.mark.emulators

# Reports an epoch, then waits; on SIGTERM reports where its state is.
TRAINER = r"""
echo "IN $(pwd) AS $(id -u) GREETING=$GREETING PATH=$PATH"
echo '{"type":"epoch","epoch":1,"epochs":2,"step":7,"metrics":{"loss":0.5}}' >> "$SPOTLINE_EVENTS"
saved='{"type":"checkpoint","step":7,"uri":"file:///state/7"}'
trap 'echo "$saved" >> "$SPOTLINE_EVENTS"; exit 143' TERM
while true; do sleep 0.1; done
"""


def test_a_job_in_a_container_reports_and_is_stopped_by_the_notice(
    vm: Vm, agent_topics: Topics, stand_in: StandIn, tmp_path: Path
) -> None:
    agent_topics.create("spot_preempted")
    record, runtime = stand_in.record, stand_in.path
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.txt").write_text("x")
    trainer_user = {"SPOTLINE_TRAINER_USER": "nobody"} if os.geteuid() == 0 else {}
    assignment = vm.assignment(
        "jimg",
        ["/bin/sh", "-c", TRAINER],
        image=IMAGE,
        data_uri=str(data),
        env={"GREETING": "hello"},
    )
    vm.boot(assignment, SPOTLINE_CONTAINER_RUNTIME=str(runtime), **trainer_user)

    epoch = None
    deadline = time.monotonic() + 60
    while epoch is None and time.monotonic() < deadline:
        for message in agent_topics.pull("epoch_done", 5):
            body = json.loads(message)
            if "epoch" in body:
                epoch = EpochDone.model_validate(body)
    assert epoch is not None and epoch.step == 7 and epoch.metrics == {"loss": 0.5}
    assert vm.server is not None
    vm.server.set_preempted()
    (message,) = agent_topics.pull("spot_preempted", 30)
    preempted = SpotPreempted.model_validate_json(message)
    assert preempted.job_id == "jimg" and preempted.step == 7
    assert preempted.checkpoint_uri == "file:///state/7"  # written inside, relayed outside
    deadline = time.monotonic() + 30
    while stand_in.containers():  # SIGTERM passed on: the container itself stopped
        assert time.monotonic() < deadline, stand_in.containers()
        time.sleep(0.1)

    argv = json.loads(record.read_text())
    job_dir = vm.workdir / "jobs" / "jimg-a1"
    assert argv[argv.index("--workdir") + 1] == str(job_dir / "code")
    volumes = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--volume"]
    assert f"{job_dir}:{job_dir}" in volumes
    assert any(volume.endswith(":ro") and "/cache/data/" in volume for volume in volumes)
    env_file = Path(argv[argv.index("--env-file") + 1])
    assert env_file.stat().st_mode & 0o777 == 0o600 and env_file.stat().st_uid == os.geteuid()
    names = {line.partition("=")[0] for line in env_file.read_text().splitlines()}
    assert {"SPOTLINE_EVENTS", "SPOTLINE_JOB_ID", "SPOTLINE_DATA_DIR", "GREETING"} <= names
    assert "PATH" not in names and "hello" not in argv  # values travel in the file
    client_env = json.loads(Path(f"{record}.client-env").read_text())
    assert "GREETING" not in client_env and "SPOTLINE_JOB_ID" not in client_env
    assert argv[argv.index("--name") + 1] == "spotline-jimg-a1-g0"
    if trainer_user:
        import pwd

        nobody = pwd.getpwnam("nobody")
        assert argv[argv.index("--user") + 1] == f"{nobody.pw_uid}:{nobody.pw_gid}"


def test_a_container_that_exits_ends_the_job_with_its_code(
    vm: Vm, agent_topics: Topics, stand_in: StandIn
) -> None:
    record, runtime = stand_in.record, stand_in.path
    command = ["/bin/sh", "-c", 'echo "inside: $SPOTLINE_JOB_ID"; exit 4']
    vm.boot(vm.assignment("jexit", command, image=IMAGE), SPOTLINE_CONTAINER_RUNTIME=str(runtime))
    event = next_finished(agent_topics)
    assert event.exit_code == 4 and "inside: jexit" in event.log_tail, event.log_tail
    assert json.loads(record.read_text())[-3:] == command


# A program the job would like root to run: it leaves a mark.
HOSTILE = """#!/bin/sh
touch {mark}
exit 0
"""


def test_the_jobs_path_does_not_choose_the_runtime(
    vm: Vm, agent_topics: Topics, tmp_path: Path
) -> None:
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    mark = tmp_path / "ran-as-the-agent"
    (hostile / "docker").write_text(HOSTILE.format(mark=mark))
    (hostile / "docker").chmod(0o755)
    assignment = vm.assignment(
        "jpath", ["/bin/true"], image=IMAGE, env={"PATH": f"{hostile}:/usr/bin:/bin"}
    )
    vm.boot(assignment)  # the runtime is the default: no stand-in

    event = next_finished(agent_topics)
    assert not mark.exists(), "the agent ran the job's docker"
    assert event.exit_code != 0


def test_the_runtime_starts_with_the_agents_environment(
    vm: Vm, agent_topics: Topics, stand_in: StandIn, tmp_path: Path
) -> None:
    record, runtime = stand_in.record, stand_in.path
    preload = tmp_path / "hostile.so"
    preload.write_text("not a library, but the client would try to load it\n")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "LD_PRELOAD": str(preload), "PYTHONPATH": "/x"}
    command = ["/bin/sh", "-c", 'echo "inside LD_PRELOAD=$LD_PRELOAD"']
    vm.boot(
        vm.assignment("jenv", command, image=IMAGE, env=env),
        SPOTLINE_CONTAINER_RUNTIME=str(runtime),
    )

    event = next_finished(agent_topics)
    assert event.exit_code == 0, event.log_tail
    client_env = json.loads(Path(f"{record}.client-env").read_text())
    assert "LD_PRELOAD" not in client_env
    assert client_env["PATH"] == os.environ["PATH"]
    assert client_env.get("PYTHONPATH") != "/x"
    # The container itself gets what the job asked for.
    assert f"inside LD_PRELOAD={preload}" in event.log_tail


def test_a_relative_runtime_is_refused_with_its_reason(
    vm: Vm, agent_topics: Topics, tmp_path: Path
) -> None:
    vm.boot(vm.assignment("jrel", ["/bin/true"], image=IMAGE), SPOTLINE_CONTAINER_RUNTIME="docker")
    event = next_finished(agent_topics)
    assert event.exit_code == 126
    assert "SPOTLINE_CONTAINER_RUNTIME='docker' is not an absolute path" in event.log_tail


@pytest.mark.parametrize(
    ("tag", "unrecoverable", "said"),
    [("9", True, "manifest unknown"), ("slow", False, "i/o timeout")],
)
def test_an_image_that_cannot_be_pulled_ends_the_attempt_naming_why(
    vm: Vm, agent_topics: Topics, stand_in: StandIn, tag: str, unrecoverable: bool, said: str
) -> None:
    record, runtime = stand_in.record, stand_in.path
    image = f"{IMAGE.rsplit(':', 1)[0]}:{tag}"
    assignment = vm.assignment("jpull", ["/bin/sh", "-c", "echo ran"], image=image)

    vm.boot(assignment, SPOTLINE_CONTAINER_RUNTIME=str(runtime))
    event = next_finished(agent_topics)

    assert event.exit_code == 1 and not record.exists()  # no `run`: the trainer never started
    assert f"stand-in-docker pull {image} failed (exit code 1)" in event.log_tail, event.log_tail
    assert said in event.log_tail
    # No VM finds a tag that does not exist; a registry out of reach may answer the next one.
    assert event.unrecoverable is unrecoverable
