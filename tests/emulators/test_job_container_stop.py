"""A gang's node whose trainer runs in a container (``image``), stopped and
started again by the real agent within one attempt, against a stand-in
runtime that plays docker's daemon (``tests.container_stand_in``): SIGKILL
to ``docker run`` kills the client only, and a container keeps its name
until it is gone.

* A grow-back request the trainer ignores (blocked with a peer): after the
  grace the agent kills the container itself, not only its client.
* A regroup while the trainer ran: the restart in the same attempt starts a
  container under a new name, though the stopped one may still hold its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spotline.shared.contract.assignment import Regroup
from spotline.shared.contract.events import SpotPreempted
from spotline.shared.domain.vms import (
    GANG_STOP_METADATA_KEY,
    JOB_METADATA_KEY,
    REGROUP_METADATA_KEY,
)
from spotline.vm_image.agent.agent import RANKS_STOP_GRACE_ENV
from tests.agent_stand_in import wait_for
from tests.container_stand_in import IMAGE, StandIn
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import INSTANCE, Vm, next_finished

pytestmark = pytest.mark.emulators

# Blocked with a peer: never sees its SIGTERM.
BLOCKED = 'trap "" TERM; touch "$STARTED"; while true; do sleep 0.1; done'


def boot(vm: Vm, stand_in: StandIn, assignment: str, started: Path) -> None:
    """The agent boots with the stand-in runtime and a 1 s grace to stop;
    returns once the container's command has started."""
    vm.boot(
        assignment,
        SPOTLINE_CONTAINER_RUNTIME=str(stand_in.path),
        **{RANKS_STOP_GRACE_ENV: "1"},
    )
    wait_for(started.exists, 120.0, what="the container did not start")


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
    boot(vm, stand_in, assignment, started)
    (pid,) = stand_in.containers().values()
    assert vm.server is not None
    vm.server.set_attributes({GANG_STOP_METADATA_KEY: "2"})

    (report,) = agent_topics.pull("spot_preempted", 60.0)
    assert SpotPreempted.model_validate_json(report).gang_stop
    wait_for(
        lambda: gone(stand_in), 30, what=f"the container (pid {pid}) outlived its killed client"
    )


FIRST_PORT, REGROUPED_PORT = 29500, 29564
# Generation 0's rank waits for ever with the lost node, deaf to SIGTERM;
# generation 1's finds its gang and ends.
RANK = (
    'trap "" TERM; touch "$STARTED"; '
    f'if [ "$MASTER_PORT" = {FIRST_PORT} ]; then while true; do sleep 0.1; done; fi; '
    'echo "rank $RANK of $WORLD_SIZE on $MASTER_PORT"'
)


def test_a_regroup_restarts_the_trainer_in_a_container_of_another_name(
    vm: Vm, agent_topics: Topics, stand_in: StandIn
) -> None:
    started = vm.tmp_path / "started"
    lost, replacement = "sl-j1-a1-n1", "sl-j1-a1-n1-g1"
    assignment = vm.gang_node(
        ["/bin/sh", "-c", RANK],
        [INSTANCE, lost],
        master_port=FIRST_PORT,
        nodes=2,
        image=IMAGE,
        env={"STARTED": str(started)},
    )
    boot(vm, stand_in, assignment, started)
    told = Regroup(
        generation=1,
        nodes=[INSTANCE, replacement],
        hosts=["127.0.0.1", "127.0.0.1"],
        master_port=REGROUPED_PORT,
    )
    assert vm.server is not None
    vm.server.set_attributes(
        {JOB_METADATA_KEY: assignment, REGROUP_METADATA_KEY: told.model_dump_json()}
    )

    finished = next_finished(agent_topics, 90.0)
    assert finished.exit_code == 0, finished.log_tail
    assert f"rank 0 of 2 on {REGROUPED_PORT}" in finished.log_tail
    assert finished.attempt == 1
    names = [argv[argv.index("--name") + 1] for argv in stand_in.runs()]
    assert names == ["spotline-j1-a1-g0", "spotline-j1-a1-g1"]
    wait_for(lambda: gone(stand_in), 30, what="the first container outlived its killed client")
