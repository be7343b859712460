"""A gang's regroup is written on its job before any node is told of it
(``node_replacement.recorded``), then marked told (``told``). Two handlers
planning at once (a survivor's stop report, the replacement's boot report, a
redelivery, the reaper) each record through one guarded update: the second
plans from the job that shows the first, so no two node lists share a
generation; and a loss heard while the nodes are told is one after the
regroup, whose node 0 saves anew. Pure: no emulator."""

from __future__ import annotations

from spotline.shared.domain import gang_resize, node_replacement, reaping
from spotline.shared.domain.documents import TellingRegroup
from spotline.shared.domain.reaper_actions import TendReplacement
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.transitions import next_attempt
from tests.unit.test_gang_resize import elastic_gang, stop
from tests.unit.test_node_replacement import N0, N1, N2, R1, at, lose, training_gang
from tests.unit.test_reaping import LIMITS

S = JobSubstatus
R2 = "sl-job1-a1-n2-g2"  # node 2's replacement, lost after the gang regrouped at 1


def test_a_shrink_and_a_full_regroup_planned_at_once_get_one_generation_each() -> None:
    """An elastic gang lost node 1, node 0 saved: the survivors' stop report
    plans the shrink. Its replacement's boot report comes at once, and would
    plan the whole gang from the job as it was (generation 1, against the
    shrink's 2: two node lists told, the older one after the newer). Recorded
    first, the boot's handler finds the shrink on the job: the smaller gang is
    asked to grow back instead, and the whole gang regroups at 3."""
    job = stop(lose(elastic_gang(), N1), N0, 40, generation=0)
    shrink = node_replacement.recorded(job, at(12))
    assert shrink.telling == TellingRegroup(generation=2, nodes=[N0, N2], shrink=True)
    assert (shrink.substatus, shrink.gang_generation) == (S.TRAINING, 2)
    # The boot's handler, its update applied to the job as stored now.
    booted = node_replacement.booted(shrink, R1, 1)
    assert node_replacement.recorded(booted, at(13)) == booted  # the shrink is told first
    booted = node_replacement.told(booted, 2)
    assert booted.telling is None
    assert node_replacement.recorded(booted, at(14)) == booted  # nothing else to plan
    assert gang_resize.grows(booted)
    asked = stop(gang_resize.grow_asked(booted, at(15)), N0, 60, generation=2)
    grown = node_replacement.recorded(asked, at(16))
    assert grown.telling == TellingRegroup(generation=3, nodes=[N0, R1, N2])
    assert (grown.substatus, grown.replacing, grown.gang_generation) == (S.TRAINING, None, 3)


def test_a_regroup_recorded_twice_is_one_regroup() -> None:
    """The boot report redelivered, or the reaper's sweep, as the regroup is
    recorded: the second record changes nothing, and tells the same value."""
    job = node_replacement.booted(stop(lose(training_gang(3), N1), N0, 40, generation=0), R1, 1)
    first = node_replacement.recorded(job, at(12))
    assert first.telling == TellingRegroup(generation=1, nodes=[N0, R1, N2])
    assert node_replacement.recorded(first, at(13)) == first
    assert node_replacement.recorded(node_replacement.told(first, 1), at(14)).telling is None


def test_told_clears_only_the_regroup_it_told() -> None:
    job = node_replacement.booted(stop(lose(training_gang(3), N1), N0, 40, generation=0), R1, 1)
    recorded = node_replacement.recorded(job, at(12))
    assert node_replacement.told(recorded, 0) == recorded
    assert node_replacement.told(job, 1) == job


def test_a_loss_while_the_regroup_is_told_waits_for_node_zeros_next_save() -> None:
    """A 3-node gang regroups at generation 1; node 2 is lost while the
    nodes are told (some may have trained on). Before, the regroup was told
    and not yet written, so the loss read as one more while the gang waited,
    and node 0's save from before the regroup counted: the gang would regroup
    from it as soon as node 2's replacement booted. Recorded first, the loss
    is one after the regroup: node 0's stop at generation 1 is waited for,
    and a late copy of its stop at generation 0 is not it."""
    job = node_replacement.booted(stop(lose(training_gang(3), N1), N0, 40, generation=0), R1, 1)
    job = node_replacement.recorded(job, at(12))
    lost = lose(job, N2, seconds=13)
    assert (lost.substatus, lost.nodes, lost.gang_generation) == (S.REPLACING_NODE, [N0, R1, R2], 2)
    assert lost.replacing is not None and not lost.replacing.saved
    lost = node_replacement.booted(lost, R2, 1)
    late = stop(lost, N0, 40, generation=0)
    assert node_replacement.plan(late, at(20)) is None
    saved = stop(late, N0, 55, generation=1)
    # The regroup at 1 is told first; then the gang regroups from node 0's new save.
    assert node_replacement.recorded(saved, at(21)) == saved
    regrouped = node_replacement.recorded(node_replacement.told(saved, 1), at(22))
    assert regrouped.telling == TellingRegroup(generation=2, nodes=[N0, R1, R2])
    assert regrouped.attempts[0].checkpoint_step == 55


def test_the_lost_nodes_own_report_at_an_older_generation_needs_no_new_save() -> None:
    """Node 2's agent says it never ran at the recorded regroup's generation:
    it was not told yet, so the gang never stepped since, and node 0's save
    before the regroup stands."""
    job = node_replacement.booted(stop(lose(training_gang(3), N1), N0, 40, generation=0), R1, 1)
    job = node_replacement.recorded(job, at(12))
    lost = lose(job, N2, seconds=13, generation=0)
    assert lost.replacing is not None and lost.replacing.saved


def test_the_reaper_tells_a_regroup_recorded_and_not_told() -> None:
    job = node_replacement.booted(stop(lose(training_gang(3), N1), N0, 40, generation=0), R1, 1)
    job = node_replacement.recorded(job, at(12))
    assert job.replacing is None
    actions = reaping.decide_jobs([job], LIMITS, at(13))
    assert TendReplacement(job) in actions


def test_a_new_attempt_has_no_regroup_to_tell() -> None:
    job = node_replacement.booted(stop(lose(training_gang(3), N1), N0, 40, generation=0), R1, 1)
    job = node_replacement.recorded(job, at(12))
    relaunched = next_attempt(job, S.PREEMPTED, at(13), "lost", max_attempts=3)
    assert (relaunched.attempt, relaunched.telling) == (2, None)
