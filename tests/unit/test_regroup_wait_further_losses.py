"""How long a gang's node waits for its regroup (``regroup.regroup_wait_s``)
against how late the job may regroup it: each further loss while the gang
waits gives its replacement the whole bound again
(``spotline.shared.domain.further_losses``), so a survivor that stopped at
the first loss must still be waiting then. Pure: no emulator."""

from __future__ import annotations

import pytest

from spotline.shared.contract.assignment import Assignment
from spotline.shared.domain import node_replacement
from spotline.vm_image.agent.regroup import REGROUP_MARGIN_S, regroup_wait_s
from tests.unit.test_further_losses import R2, waiting_gang
from tests.unit.test_node_replacement import N0, N2, R1, at, lose


def survivor(nodes: int, bound: int) -> Assignment:
    """Node 0's assignment: a gang of ``nodes`` with ``bound`` for a replacement."""
    job = waiting_gang(nodes, replace_node_timeout_s=bound)
    names = [f"sl-job1-a1-n{rank}" for rank in range(nodes)]
    return Assignment(
        job_id="job1",
        attempt=1,
        project="p",
        spec=job.spec,
        checkpoint_dir="gs://b/c",
        output_dir="gs://b/o",
        nodes=names,
        hosts=names,
        master_port=20001,
    )


@pytest.mark.parametrize("bound", [120, 300])
def test_a_survivor_waits_as_long_as_a_second_loss_lets_the_gang_regroup(bound: int) -> None:
    """Node 1 lost at 10 s (node 0 stops then); node 2 lost just before the
    bound. Its replacement may join up to a bound after that: node 0 is
    still waiting, rather than stopping and leaving the gang to stall."""
    job = waiting_gang(3, replace_node_timeout_s=bound)
    second = 10 + bound - 1
    job = lose(job, N2, seconds=second)
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R2, 1)
    latest = second + bound - 1
    assert not node_replacement.overdue(job, at(latest))
    planned = node_replacement.plan(job, at(latest))
    assert planned is not None and planned.nodes == (N0, R1, R2)
    # From node 0's stop at the first loss, and a margin for the reports after.
    assert regroup_wait_s(survivor(3, bound)) >= latest - 10 + REGROUP_MARGIN_S


def test_a_two_node_gang_waits_its_bound_and_the_margin() -> None:
    """No further loss keeps a 2-node gang's attempt: the wait is as before."""
    assert regroup_wait_s(survivor(2, 300)) == 300 + REGROUP_MARGIN_S
