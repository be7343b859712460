"""A gang that regrouped around a replacement loses a node that never
rejoined (its agent still waiting for the regroup when its own notice
came), through the real handlers: the gang has not stepped since the
regroup, so there is no new save to wait for, and it regroups again once
the new replacement is up (``node_replacement.lost``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.contract.events import SpotPreempted
from spotline.shared.domain.states import JobSubstatus
from tests.emulators.test_gang_further_losses import three_training
from tests.emulators.test_gang_replacement import boot, job_of, preempt
from tests.emulators.test_gang_resize import N0, N1, N2, R1, gang_stop, regroup, told
from tests.emulators.test_gangs import node

pytestmark = pytest.mark.emulators
R2 = "sl-job1-a1-n2-g2"


def regrouped_once(call: Callable[..., Any], host: LocalCloud) -> None:
    """A 3-node gang lost node 1, both survivors stopped (node 0 saved at
    step 40), and the replacement booted: every node is told the regroup
    at generation 1, none has taken it yet."""
    three_training(call)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    gang_stop(call, N2, None, generation=0, mid="g2")
    boot(call, R1, mid="b1")
    assert told(host, N2) == regroup(1, [N0, R1, N2])


def test_a_node_lost_before_it_took_the_regroup_needs_no_new_save(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    regrouped_once(call, host)
    # Its own notice as it waited, before it read the regroup: its agent
    # reports the generation it last ran in. Node 0's ranks, restarted at
    # generation 1, wait in their rendezvous with it: no step, no stop, no save.
    notice = node(SpotPreempted, N2, generation=0)
    call("on_spot_preempted", "spot_preempted", notice, message_id="p2")
    boot(call, R2, mid="b2")
    # Before: the job waited for node 0's save, and was relaunched whole at its bound.
    assert told(host, N0) == regroup(2, [N0, R1, R2])
    job = job_of(project)
    assert (job.substatus, job.attempt, job.preemptions) == (JobSubstatus.TRAINING, 1, 2)
    assert job.attempts[0].checkpoint_step == 40
