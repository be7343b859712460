"""A gang's node waiting for its gang to regroup (its ranks stopped with the
gang on another node's notice) gets a notice of its own: the real agent says
so at once, so that spotline relaunches the gang rather than regrouping
around a node that will not come back (which only the log sink's report,
late, and the replacement's bound would otherwise catch)."""

from __future__ import annotations

import os
import signal

import pytest

from spotline.shared.contract.events import SpotPreempted
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import INSTANCE, Vm

pytestmark = pytest.mark.emulators


def gang_assignment(vm: Vm) -> str:
    """Node 0 of a 2-node command gang whose trainer exits as ranks do when
    the gang stops on another node's notice (143, no notice on this node)."""
    return vm.gang_node(["/bin/sh", "-c", "exit 143"], [INSTANCE, "sl-j1-a1-n1"], nodes=2)


def test_a_node_taken_while_it_waits_for_the_regroup_reports_its_own_loss(
    vm: Vm, agent_topics: Topics
) -> None:
    agent_topics.create("spot_preempted")
    agent = vm.boot(gang_assignment(vm))
    (stop,) = agent_topics.pull("spot_preempted", 60.0)
    stopped = SpotPreempted.model_validate_json(stop)
    assert (stopped.instance, stopped.gang_stop) == (INSTANCE, True)

    os.kill(agent.process.pid, signal.SIGTERM)  # this VM's own notice, while it waits
    (loss,) = agent_topics.pull("spot_preempted", 30.0)
    lost = SpotPreempted.model_validate_json(loss)
    assert (lost.instance, lost.gang_stop, lost.generation) == (INSTANCE, False, 0)
    assert agent.wait(30.0) is not None  # and it does not wait on for a regroup
    assert agent_topics.pull("job_finished", 1.0) == []
