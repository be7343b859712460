"""A regroup told to the gang's nodes while another node is lost: the
handler that told it writes it on the job after the loss was written
(``node_replacement.regrouped``). The nodes it named are no longer the
gang's, so it is not the regroup the job waits for. Pure: no emulator."""

from __future__ import annotations

from spotline.shared.domain import gang_resize, node_replacement, pending_nodes
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobSubstatus
from tests.unit.test_further_losses import N3, four_shrunk
from tests.unit.test_gang_resize import stop
from tests.unit.test_node_replacement import N0, N2, R1, at, lose

S = JobSubstatus
R2 = "sl-job1-a1-n2-g3"


def test_a_grow_back_told_as_a_node_of_the_smaller_gang_is_lost_is_not_recorded() -> None:
    """A 4-node elastic gang trains at 3 (nodes 0, 2, 3) while node 1 is
    replaced. Node 1's replacement up, the gang stopped to grow back and
    node 0 saved: the regroup to 4 nodes is told. Node 2 is lost before
    the handler writes it: the gang still waits, for node 2's replacement."""
    job = node_replacement.booted(four_shrunk(), R1, 1)
    job = stop(gang_resize.grow_asked(job, at(40)), N0, 60, generation=2)
    planned = node_replacement.plan(job, at(41))
    assert planned is not None and planned.nodes == (N0, R1, N2, N3)
    job = lose(job, N2, seconds=42)
    assert pending_nodes.replacements(job) == [R1, R2]
    after = node_replacement.regrouped(job, planned, at(43))
    assert after == job
    assert (after.substatus, pending_nodes.replacements(after)) == (S.REPLACING_NODE, [R1, R2])
    # It goes on as after any such loss: the rest train on, and all four
    # regroup once node 2's replacement is up.
    job = node_replacement.regrouped(job, shrink := _plan(job, 44), at(44))
    assert shrink.shrink and (job.substatus, job.gang_generation) == (S.TRAINING, 3)
    job = stop(gang_resize.grow_asked(node_replacement.booted(job, R2, 1), at(50)), N0, 70, 3)
    grown = node_replacement.regrouped(job, full := _plan(job, 51), at(51))
    assert full.nodes == (N0, R1, R2, N3) and full.generation == 4
    assert (grown.substatus, grown.replacing) == (S.TRAINING, None)


def _plan(job: JobDoc, seconds: float) -> node_replacement.RegroupPlan:
    planned = node_replacement.plan(job, at(seconds))
    assert planned is not None
    return planned
