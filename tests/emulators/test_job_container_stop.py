"""A gang's node whose trainer runs in a container (``image``), stopped and
started again by the real agent within one attempt, against a stand-in
runtime that plays docker's daemon (``tests.container_stand_in``): SIGKILL
to ``docker run`` kills the client only, and a container keeps its name
until it is gone.

* A grow-back request the trainer ignores (blocked with a peer): after the
  grace the agent kills the container itself, not only its client.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from spotline.shared.contract.events import SpotPreempted
from spotline.shared.domain.vms import GANG_STOP_METADATA_KEY
from spotline.vm_image.agent.agent import RANKS_STOP_GRACE_ENV
from tests.container_stand_in import IMAGE, StandIn
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import INSTANCE, Vm

pytestmark = pytest.mark.emulators

# Blocked with a peer: never sees its SIGTERM.
BLOCKED = 'trap "" TERM; touch "$STARTED"; while true; do sleep 0.1; done'


def wait_for(what: str, done: Callable[[], bool], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def gone(stand_in: StandIn) -> bool:
    """No container recorded, and none of its processes left."""
    return not stand_in.containers()


def test_a_container_that_ignores_the_stop_to_grow_back_is_killed_after_the_grace(
    vm: Vm, agent_topics: Topics, stand_in: StandIn
) -> None:
    agent_topics.create("spot_preempted")
    started = vm.tmp_path / "started"
    assignment = vm.gang_node(
        ["/bin/sh", "-c", BLOCKED],
        [INSTANCE, "sl-j1-a1-n2"],
        generation=2,
        nodes=3,
        min_nodes=2,
        image=IMAGE,
        env={"STARTED": str(started)},
    )
    vm.boot(
        assignment,
        SPOTLINE_CONTAINER_RUNTIME=str(stand_in.path),
        **{RANKS_STOP_GRACE_ENV: "1"},
    )
    wait_for("the container did not start", started.exists, 120.0)
    (pid,) = stand_in.containers().values()
    assert vm.server is not None
    vm.server.set_attributes({GANG_STOP_METADATA_KEY: "2"})

    (report,) = agent_topics.pull("spot_preempted", 60.0)
    assert SpotPreempted.model_validate_json(report).gang_stop
    wait_for(f"the container (pid {pid}) outlived its killed client", lambda: gone(stand_in), 30)
