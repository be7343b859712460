"""A gang that loses a node while it sets up regroups around its replacement
(``spotline.shared.domain.node_replacement``): the real agent of a surviving
node takes the new node list whether it comes before its trainer starts or
while that trainer waits in a rendezvous with the lost node, which it then
starts again with the new generation's env."""

from __future__ import annotations

import pytest

from spotline.shared.contract.assignment import Regroup
from spotline.shared.domain.vms import JOB_METADATA_KEY, REGROUP_METADATA_KEY
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import INSTANCE, Vm, next_finished, wait_started

pytestmark = pytest.mark.emulators
LOST, REPLACEMENT = "sl-j1-a1-n1", "sl-j1-a1-n1-g1"
FIRST_PORT, REGROUPED_PORT = 29500, 29564
# A rank of the first node list waits for ever in its rendezvous with the
# lost node; one of the regrouped list finds its gang and ends.
RANK = (
    'touch "$STARTED"; '
    f'if [ "$MASTER_PORT" = {FIRST_PORT} ]; then sleep 600; fi; '
    'echo "rank $RANK of $WORLD_SIZE on $MASTER_PORT with $NODES"'
)


def setting_up_gang(vm: Vm) -> str:
    return vm.gang_node(["/bin/sh", "-c", RANK], [INSTANCE, LOST], master_port=FIRST_PORT, nodes=2)


def regroup(assignment: str) -> dict[str, str]:
    """The VM's metadata once told the regroup (a write replaces it whole)."""
    told = Regroup(
        generation=1,
        nodes=[INSTANCE, REPLACEMENT],
        hosts=["127.0.0.1", "127.0.0.1"],
        master_port=REGROUPED_PORT,
    )
    return {JOB_METADATA_KEY: assignment, REGROUP_METADATA_KEY: told.model_dump_json()}


EXPECTED = f"rank 0 of 2 on {REGROUPED_PORT} with {INSTANCE} {REPLACEMENT}"


def test_a_rank_waiting_for_the_lost_node_is_started_again_with_the_new_node_list(
    vm: Vm, agent_topics: Topics
) -> None:
    started = vm.tmp_path / "started"
    assignment = setting_up_gang(vm)
    agent = vm.boot(assignment, STARTED=str(started))
    wait_started(agent, started)  # the rank waits in its rendezvous
    assert vm.server is not None
    vm.server.set_attributes(regroup(assignment))
    finished = next_finished(agent_topics, 90.0)
    assert finished.exit_code == 0, finished.log_tail
    assert EXPECTED in finished.log_tail
    assert finished.attempt == 1


def test_a_regroup_told_before_the_trainer_starts_is_the_node_list_it_starts_with(
    vm: Vm, agent_topics: Topics
) -> None:
    assignment = setting_up_gang(vm)
    agent = vm.boot(assignment, STARTED=str(vm.tmp_path / "started"))
    assert vm.server is not None
    vm.server.set_attributes(regroup(assignment))  # the replacement booted as this node set up
    finished = next_finished(agent_topics, 120.0)
    assert finished.exit_code == 0, agent.log.read_text()[-3000:]
    assert EXPECTED in finished.log_tail
