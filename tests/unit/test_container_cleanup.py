"""The removal of the containers the agent started earlier
(``remove_agent_containers``, ``remove_earlier_containers``), against the
stand-in runtime (``tests.container_stand_in``), and the stand-in's own
answers where docker refuses or forgives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spotline.shared.contract.assignment import Assignment
from spotline.shared.domain.spec import JobSpec
from spotline.vm_image.agent.container import (
    AGENT_LABEL,
    RUNTIME_ENV,
    ContainersLeft,
    remove_agent_containers,
)
from spotline.vm_image.agent.trainer_launch import remove_earlier_containers
from spotline.vm_image.agent.trainer_process import CannotStart
from tests.container_stand_in import IMAGE, StandIn

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
STALE = "spotline-j0-a1-g0"
# docker's answer when the container's process does not die (a disk hung).
STUCK = (
    f"Error response from daemon: Could not kill running container {STALE}, cannot remove - "
    "tried to kill container, but did not receive an exit event"
)
DAEMON_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?"
)


def warnings(out: str) -> list[str]:
    return [
        str(record["message"])
        for record in map(json.loads, out.splitlines())
        if record.get("severity") == "WARNING"
    ]


def answering(folder: Path, stand_in: StandIn, command: str, said: str, code: int) -> Path:
    """A runtime that answers ``command`` with ``said`` on stderr and exit
    ``code``, as docker does in that state, and leaves the rest to the stand-in."""
    runtime = folder / f"docker-{command}-{code}"
    runtime.write_text(
        f'#!/bin/sh\nif [ "$1" = {command} ]; then echo "{said}" >&2; exit {code}; fi\n'
        f'exec {stand_in.path} "$@"\n'
    )
    runtime.chmod(0o755)
    return runtime


def assignment(image: str | None) -> Assignment:
    spec = {"user": "alice", "machine_ids": ["g2-standard-4"], "framework": "command"}
    return Assignment(
        job_id="j1",
        attempt=1,
        project="p",
        spec=JobSpec.model_validate({**spec, "command": ["/bin/true"], "image": image}),
        checkpoint_dir="file:///tmp/ckpt",
        output_dir="file:///tmp/out",
    )


def test_only_the_agents_containers_are_removed_each_logged(
    stand_in: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in.run_detached(STALE, SLEEP, AGENT_LABEL)
    users = stand_in.run_detached("spotline-mine", SLEEP, "spotline.agent=0", "team=ml")

    removed = remove_agent_containers({RUNTIME_ENV: str(stand_in.path)}, job_id="j1")

    assert removed == [STALE]
    assert stand_in.containers() == {"spotline-mine": users}
    (said,) = warnings(capsys.readouterr().out)
    assert said.startswith(f"removed the container {STALE}, which spotline started earlier")


def test_with_none_left_nothing_is_said(
    stand_in: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    assert remove_agent_containers({RUNTIME_ENV: str(stand_in.path)}) == []
    assert warnings(capsys.readouterr().out) == []


def test_a_vm_without_the_runtime_has_no_container_to_remove(tmp_path: Path) -> None:
    assert remove_agent_containers({RUNTIME_ENV: str(tmp_path / "docker")}) == []


@pytest.mark.parametrize(
    "said",
    [
        f"Error response from daemon: No such container: {STALE}",  # older docker, podman
        f"Error response from daemon: removal of container {STALE} is already in progress",
    ],
)
def test_a_container_gone_or_going_as_it_is_removed_counts_as_removed(
    stand_in: StandIn, tmp_path: Path, said: str
) -> None:
    stand_in.run_detached(STALE, SLEEP, AGENT_LABEL)
    runtime = answering(tmp_path, stand_in, "rm", said, 1)
    assert remove_agent_containers({RUNTIME_ENV: str(runtime)}) == [STALE]


@pytest.mark.parametrize("image", [IMAGE, None], ids=["in-a-container", "without-one"])
def test_a_container_that_cannot_be_removed_stops_any_trainer_naming_it(
    stand_in: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, image: str | None
) -> None:
    stand_in.run_detached(STALE, SLEEP, AGENT_LABEL)
    runtime = answering(tmp_path, stand_in, "rm", STUCK, 1)
    monkeypatch.setenv(RUNTIME_ENV, str(runtime))

    with pytest.raises(CannotStart) as raised:
        remove_earlier_containers(assignment(image))

    said = str(raised.value)
    assert f"`{runtime} rm --force {STALE}` failed (exit code 1): {STUCK}" in said
    assert "may hold the GPU, ports or memory" in said
    assert f"sudo {runtime} rm --force NAME" in said
    assert raised.value.exit_code == 1 and not raised.value.unrecoverable


def test_a_runtime_that_cannot_list_stops_only_a_trainer_in_a_container(
    stand_in: StandIn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runtime = answering(tmp_path, stand_in, "ps", DAEMON_DOWN, 1)
    monkeypatch.setenv(RUNTIME_ENV, str(runtime))

    with pytest.raises(CannotStart) as raised:
        remove_earlier_containers(assignment(IMAGE))
    assert f"failed (exit code 1): {DAEMON_DOWN}" in str(raised.value)
    assert "systemctl status docker-ps-1" in str(raised.value)

    remove_earlier_containers(assignment(None))  # it needs no runtime
    (said,) = warnings(capsys.readouterr().out)
    assert DAEMON_DOWN in said and said.endswith("runs in no container, starts anyway")
    with pytest.raises(ContainersLeft) as left:
        remove_agent_containers({RUNTIME_ENV: str(runtime)})
    assert left.value.names == []


def docker(stand_in: StandIn, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(stand_in.path), *args], capture_output=True, text=True, timeout=30, check=False
    )


def test_the_stand_in_answers_as_docker_does(stand_in: StandIn) -> None:
    stand_in.run_detached(STALE, SLEEP, AGENT_LABEL)

    unknown = docker(stand_in, "ps", "--nope")
    assert (unknown.returncode, unknown.stderr) == (
        125,
        "unknown flag: --nope\nSee 'docker ps --help'.\n",
    )
    bad = docker(stand_in, "ps", "--filter", "colour=red", "--format", "{{.Names}}")
    assert bad.returncode == 1
    assert bad.stderr == "Error response from daemon: invalid filter 'colour'\n"
    shapeless = docker(stand_in, "ps", "--filter", "label", "--format", "{{.Names}}")
    assert shapeless.returncode == 125 and "bad format of filter" in shapeless.stderr
    listed = docker(stand_in, "ps", "--filter", f"label={AGENT_LABEL}", "--format", "{{.Names}}")
    assert (listed.returncode, listed.stdout) == (0, f"{STALE}\n")

    running = docker(stand_in, "rm", STALE)
    assert running.returncode == 1 and "container is running" in running.stderr
    missing = docker(stand_in, "rm", "--force", "nowhere")  # docker's CLI forgives it with --force
    assert (missing.returncode, missing.stderr) == (
        0,
        "Error response from daemon: No such container: nowhere\n",
    )
    assert docker(stand_in, "rm", "nowhere").returncode == 1
    removed = docker(stand_in, "rm", "--force", STALE)
    assert (removed.returncode, removed.stdout) == (0, f"{STALE}\n")
    assert stand_in.containers() == {}

    flag = docker(stand_in, "run", "--cpus", "2", IMAGE, "true")
    assert (flag.returncode, flag.stderr) == (
        125,
        "unknown flag: --cpus\nSee 'docker run --help'.\n",
    )
