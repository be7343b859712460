"""A node's ranks stopped for its gang's regroup (``Agent._on_regroup``)
that exit with a code of their own choosing: the stop was the agent's, so
the real agent starts them again with the new node list whatever the code,
as an exit after a preemption notice is the notice's whatever its code."""

from __future__ import annotations

import time

import pytest

from tests.emulators.test_agent_failures import Topics
from tests.emulators.test_agent_setup_regroup import EXPECTED, FIRST_PORT, LOST, regroup
from tests.vm_agent import INSTANCE, Vm, next_finished

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
    deadline = time.monotonic() + 120
    while not started.exists():  # the rank waits in its rendezvous
        assert agent.process.poll() is None, agent.log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the trainer never started"
        time.sleep(0.2)
    assert vm.server is not None
    vm.server.set_attributes(regroup(assignment))
    finished = next_finished(agent_topics, 90.0)
    assert finished.exit_code == 0, finished.log_tail
    assert EXPECTED in finished.log_tail
