"""Containers the agent started earlier never outlive it on a VM: before a
job's trainer starts, the real agent removes every container labelled as its
own, and no other, against a stand-in runtime that plays docker's daemon
(``tests.container_stand_in``): a container runs on when its client is
killed, and holds its name and its ports until it is removed.

* A cooling or restarted VM where an earlier job's container still runs
  (holding the port the next trainer binds, as it would hold the GPU): it
  is removed before the trainer starts; a user's own container is left
  running.
* The agent killed (SIGKILL, as the kernel's OOM killer does) while its
  container trains, and started again on the same job: the orphan is removed
  and the job goes on in a new container under the same name.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from spotline.vm_image.agent.container import AGENT_LABEL
from tests.agent_stand_in import wait_for
from tests.container_stand_in import IMAGE, StandIn
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import Vm, next_finished

pytestmark = pytest.mark.emulators

# Holds the port (argv[1]) until killed, as a trainer holds its GPU.
HOLD = "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1])));"
HOLD += " s.listen(); time.sleep(600)"
# The job's trainer: binds the same port (it fails while another holds it),
# says it started, waits for $GO if set, then ends.
TRAIN = r"""
import os, pathlib, socket, time
held = socket.socket()
held.bind(("127.0.0.1", int(os.environ["PORT"])))
with open(os.environ["STARTED"], "a") as started:
    started.write("started\n")
while os.environ.get("GO") and not os.path.exists(os.environ["GO"]):
    time.sleep(0.1)
print("trained on port", os.environ["PORT"])
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("image", [IMAGE, None], ids=["in-a-container", "without-one"])
def test_an_earlier_jobs_container_is_removed_before_the_trainer_and_a_users_is_kept(
    vm: Vm, agent_topics: Topics, stand_in: StandIn, image: str | None
) -> None:
    port = free_port()
    hold = [sys.executable, "-c", HOLD, str(port)]
    stale = stand_in.run_detached("spotline-j0-a1-g0", hold, AGENT_LABEL)
    users = stand_in.run_detached("notebook", [sys.executable, "-c", HOLD, str(free_port())])
    started = vm.tmp_path / "started"
    assignment = vm.assignment(
        "jnext",
        [sys.executable, "-c", TRAIN],
        image=image,
        env={"PORT": str(port), "STARTED": str(started)},
    )
    agent = vm.boot(assignment, SPOTLINE_CONTAINER_RUNTIME=str(stand_in.path))

    finished = next_finished(agent_topics, 90.0)
    assert finished.exit_code == 0, finished.log_tail  # the port was free: the stale one was gone
    assert f"trained on port {port}" in finished.log_tail
    assert not alive(stale) and "spotline-j0-a1-g0" not in stand_in.containers()
    assert agent.said("WARNING", "removed the container spotline-j0-a1-g0")
    assert alive(users) and stand_in.containers()["notebook"] == users  # never touched
    assert not agent.said("WARNING", "notebook")


def test_an_agent_killed_while_its_container_trains_removes_it_when_started_again(
    vm: Vm, agent_topics: Topics, stand_in: StandIn
) -> None:
    started, go = vm.tmp_path / "started", vm.tmp_path / "go"
    assignment = vm.assignment(
        "j1",
        [sys.executable, "-c", TRAIN],
        image=IMAGE,
        env={"PORT": str(free_port()), "STARTED": str(started), "GO": str(go)},
    )
    runtime = {"SPOTLINE_CONTAINER_RUNTIME": str(stand_in.path)}
    first = vm.boot(assignment, **runtime)
    wait_for(started.exists, 120.0, what="the container did not start")
    (orphan,) = stand_in.containers().values()
    first.kill()  # the agent and the container's client, as its unit's cgroup goes
    assert alive(orphan), "the container ended with its client: the stand-in is kinder than docker"

    assert vm.server is not None
    vm.server.close()
    second = vm.boot(assignment, **runtime)  # the same job, as the restarted agent reads it
    wait_for(
        lambda: started.read_text().count("started") == 2,
        120.0,
        what="the trainer did not start again",
    )
    assert not alive(orphan)
    assert second.said("WARNING", "removed the container spotline-j1-a1-g0")
    go.touch()

    finished = next_finished(agent_topics, 90.0)
    assert finished.exit_code == 0, finished.log_tail
    assert (finished.job_id, finished.attempt) == ("j1", 1)
    names = [argv[argv.index("--name") + 1] for argv in stand_in.runs()]
    assert names == ["spotline-j1-a1-g0", "spotline-j1-a1-g0"]
    wait_for(lambda: not stand_in.containers(), 30.0, what="the container outlived its job")
