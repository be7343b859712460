"""A node's ranks stopped for its gang's regroup (``Agent._on_regroup``)
that exit with a code of their own choosing: the stop was the agent's, so
the real agent starts them again with the new node list whatever the code,
as an exit after a preemption notice is the notice's whatever its code."""

from __future__ import annotations

import sys

import pytest

from spotline.shared.contract.events import SpotPreempted
from spotline.shared.domain.vms import GANG_STOP_METADATA_KEY
from tests.emulators.test_agent_failures import Topics
from tests.emulators.test_agent_setup_regroup import EXPECTED, FIRST_PORT, LOST, regroup
from tests.vm_agent import INSTANCE, Vm, next_finished, wait_started

pytestmark = pytest.mark.emulators
# A rank of the first node list waits in its rendezvous with the lost node,
# and on SIGTERM exits 0, as a trainer that takes any stop for its end does.
RANK = (
    'touch "$STARTED"; '
    f'if [ "$MASTER_PORT" = {FIRST_PORT} ]; then trap "exit 0" TERM; sleep 600 & wait; fi; '
    'echo "rank $RANK of $WORLD_SIZE on $MASTER_PORT with $NODES"'
)


def test_a_rank_that_exits_0_when_stopped_for_the_regroup_is_started_again(
    vm: Vm, agent_topics: Topics
) -> None:
    """Before, node 0 reported its trainer finished (exit 0) on the first
    node list: the job completed untrained."""
    started = vm.tmp_path / "started"
    command = ["/bin/sh", "-c", RANK]
    assignment = vm.gang_node(command, [INSTANCE, LOST], master_port=FIRST_PORT, nodes=2)
    agent = vm.boot(assignment, STARTED=str(started))
    wait_started(agent, started)  # the rank waits in its rendezvous
    assert vm.server is not None
    vm.server.set_attributes(regroup(assignment))
    finished = next_finished(agent_topics, 90.0)
    assert finished.exit_code == 0, finished.log_tail
    assert EXPECTED in finished.log_tail


def test_a_trainer_that_exits_0_when_asked_to_grow_back_is_reported_stopped_at_its_save(
    vm: Vm, agent_topics: Topics
) -> None:
    """Before, the smaller gang's head reported its trainer finished (exit
    0): the job completed at the smaller size, short of its epochs."""
    agent_topics.create("spot_preempted")
    ready = vm.tmp_path / "ready"
    command = [sys.executable, "-c", EXITS_0_ON_SIGTERM, str(ready)]
    names = [INSTANCE, "sl-j1-a1-n2"]
    agent = vm.boot(vm.gang_node(command, names, generation=2, nodes=3, min_nodes=2))
    wait_started(agent, ready)
    assert vm.server is not None
    vm.server.set_attributes({GANG_STOP_METADATA_KEY: "2"})
    (report,) = agent_topics.pull("spot_preempted", 60.0)
    stopped = SpotPreempted.model_validate_json(report)
    assert (stopped.instance, stopped.gang_stop, stopped.generation) == (INSTANCE, True, 2)
    assert stopped.step == 40
    assert agent_topics.pull("job_finished", 1.0) == []


# Saves step 40, trains on, and on SIGTERM exits 0.
EXITS_0_ON_SIGTERM = """
import json, os, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
ckpt = os.environ["SPOTLINE_CHECKPOINT_DIR"] + "/step-40"
Path(ckpt).write_text("40")
with open(os.environ["SPOTLINE_EVENTS"], "a") as events:
    events.write(json.dumps({"type": "checkpoint", "step": 40, "uri": ckpt}) + "\\n")
Path(sys.argv[1]).write_text("ready")
time.sleep(600)
"""
