"""A gang waiting for its replacement loses another node, or the replacement
itself (``spotline.shared.domain.further_losses``): that one is replaced
too and the attempt kept, unless no original node is left, a limit is
reached or a finish is held. Pure: no emulator."""

from __future__ import annotations

from typing import Any

import pytest

from spotline.shared.contract.events import JobFinished
from spotline.shared.domain import gang_finish, gang_resize, node_replacement, pending_nodes
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import StaleEvent
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.unit.test_gang_resize import stop
from tests.unit.test_node_replacement import N0, N1, N2, R0, R1, at, lose, regroup, training_gang

S = JobSubstatus
R2 = "sl-job1-a1-n2-g2"  # node 2's replacement, named for the gang's next generation
R0_LATER = "sl-job1-a1-n0-g2"


def waiting_gang(nodes: int = 3, **spec: Any) -> JobDoc:
    """A gang that lost node 1 at 10 s, node 0's save at step 40 reported."""
    job = node_replacement.stopped(training_gang(nodes, **spec), N0, 1, 40, None, generation=0)
    return lose(job, N1)


def test_a_second_node_lost_while_waiting_is_replaced_too_keeping_the_attempt() -> None:
    job = lose(waiting_gang(), N2, seconds=20)
    assert (job.status, job.substatus, job.attempt) == (JobStatus.RECOVERING, S.REPLACING_NODE, 1)
    assert job.nodes == [N0, R1, R2] and job.instance == N0
    assert job.attempts[0].node_names == [N0, R1, R2] and job.attempts[0].ended_at is None
    assert (job.preemptions, job.gang_generation) == (2, 2)
    assert pending_nodes.replacements(job) == [R1, R2]
    replacing = job.replacing
    assert replacing is not None and replacing.saved  # node 0's save at the first stop
    assert pending_nodes.of_lost(job, N2) is not None
    # The bound counts from the latest loss: its replacement gets the whole of it.
    bound = job.spec.replace_node_timeout_s
    assert not node_replacement.overdue(job, at(20 + bound - 1))
    assert node_replacement.overdue(job, at(20 + bound))


def test_the_gang_regroups_only_once_every_replacement_is_up() -> None:
    job = lose(waiting_gang(), N2, seconds=20)
    job = node_replacement.booted(job, R1, 1)
    assert node_replacement.plan(job, at(30)) is None
    job = node_replacement.booted(job, R2, 1)
    planned = node_replacement.plan(job, at(31))
    assert planned is not None and not planned.shrink
    # A generation newer than any replacement was made at: each takes the new list.
    assert (planned.nodes, planned.generation) == ((N0, R1, R2), 2)
    job = node_replacement.regrouped(job, planned, at(31))
    assert (job.substatus, job.attempt, job.replacing, job.gang_generation) == (
        S.TRAINING,
        1,
        None,
        2,
    )
    assert job.gang_stops == []


def test_the_survivors_stops_for_the_first_loss_still_count_after_another() -> None:
    """Node 0's stop report (generation 0) heard after the second loss is
    still the save the regroup waits for: the gang stopped once."""
    job = lose(training_gang(3), N1)
    job = lose(job, N2, seconds=20)
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R2, 1)
    assert node_replacement.plan(job, at(30)) is None
    job = node_replacement.stopped(job, N0, 1, 40, None, generation=0)
    assert node_replacement.plan(job, at(31)) is not None


@pytest.mark.parametrize("report", ["stopped-before", "agent-after-saving"])
def test_node_zero_lost_second_is_replaced_and_its_save_counts(report: str) -> None:
    job = waiting_gang() if report == "stopped-before" else lose(training_gang(3), N1)
    job = lose(job, N0, seconds=20, saved=report == "agent-after-saving")
    assert (job.substatus, job.attempt, job.preemptions) == (S.REPLACING_NODE, 1, 2)
    assert job.nodes == [R0_LATER, R1, N2] and job.instance == R0_LATER
    assert job.replacing is not None and job.replacing.saved
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R0_LATER, 1)
    planned = node_replacement.plan(job, at(21))
    assert planned is not None and planned.nodes == (R0_LATER, R1, N2)


def test_node_zero_lost_second_reported_by_the_log_sink_waits_for_its_save() -> None:
    """Its stop report had not come: the regroup waits for its agent's
    report after saving, its stop report heard late, or its notice's end."""
    job = lose(lose(training_gang(3), N1), N0, seconds=20, saved=False)
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R0_LATER, 1)
    assert node_replacement.plan(job, at(21)) is None
    assert node_replacement.plan(job, at(20 + 60)) is not None  # its notice is over
    assert node_replacement.plan(node_replacement.lost_node_saved(job, N0, 1), at(21))
    late_stop = node_replacement.stopped(job, N0, 1, 40, None, generation=0)
    assert node_replacement.plan(late_stop, at(21)) is not None
    assert late_stop.attempts[0].checkpoint_step == 40


def test_the_replacement_lost_before_it_joins_is_replaced_under_a_new_name() -> None:
    job = node_replacement.booted(waiting_gang(), R1, 1)
    job = lose(job, R1, seconds=20)
    assert (job.substatus, job.attempt, job.preemptions) == (S.REPLACING_NODE, 1, 2)
    again = "sl-job1-a1-n1-g2-1"
    assert job.nodes == [N0, again, N2] and job.gang_generation == 2
    replacing = job.replacing
    assert replacing is not None
    assert (replacing.replacement, replacing.lost, replacing.booted) == (again, R1, False)
    assert replacing.since == at(10)  # a replacement lost each time holds the gang no longer
    with pytest.raises(StaleEvent):  # a late copy of its loss
        lose(job, R1, seconds=21)
    assert node_replacement.plan(job, at(30)) is None
    planned = node_replacement.plan(node_replacement.booted(job, again, 1), at(30))
    assert planned is not None and planned.nodes == (N0, again, N2)


@pytest.mark.parametrize("nodes", [2, 3])
def test_every_original_node_lost_relaunches_the_whole_gang(nodes: int) -> None:
    job = waiting_gang(nodes)
    if nodes == 3:
        job = lose(job, N2, seconds=15)
    job = lose(job, N0, seconds=20)
    assert (job.substatus, job.attempt, job.replacing, job.nodes) == (
        S.REQUESTING_SERVER,
        2,
        None,
        [],
    )
    assert job.preemptions == nodes and job.attempts[0].outcome == "preempted"


def test_a_duplicate_or_late_report_of_the_second_lost_node_is_stale() -> None:
    job = lose(waiting_gang(), N2, seconds=20)
    for source in ({}, {"step": 41}, {"saved": True}):
        with pytest.raises(StaleEvent):
            lose(job, N2, seconds=21, **source)
    # Its stop report, late: it is no node of the gang any more.
    assert node_replacement.stopped(job, N2, 1, None, None, generation=0) == job


def test_at_the_preemption_limit_a_second_loss_ends_the_attempt_as_before() -> None:
    job = lose(waiting_gang(max_preemptions=1), N2, seconds=20)
    assert (job.status, job.attempts[0].outcome) == (JobStatus.FAILED, "preempted")


def test_a_finish_held_for_judging_relaunches_on_a_second_loss() -> None:
    exit_1 = JobFinished(job_id="job1", attempt=1, instance=N2, sent_at=at(5), exit_code=1)
    held = gang_finish.hold(training_gang(3), exit_1, at(5)).held_finish
    assert held is not None
    job = lose(waiting_gang().model_copy(update={"held_finish": held}), N2, seconds=20)
    assert job.attempt == 2 and job.replacing is None


def test_an_elastic_gang_before_its_first_shrink_replaces_a_second_node_and_shrinks() -> None:
    n3 = "sl-job1-a1-n3"
    job = lose(training_gang(4, min_nodes=2), N1)
    job = lose(job, N2, seconds=20)
    assert job.nodes == [N0, R1, R2, n3] and job.attempt == 1
    job = stop(job, N0, 40, generation=0)
    planned = node_replacement.plan(job, at(21))
    assert planned is not None and planned.shrink
    assert (planned.nodes, planned.generation) == ((N0, n3), 3)
    job = node_replacement.regrouped(job, planned, at(21))
    assert (job.substatus, job.resizes) == (S.TRAINING, 1)


def test_a_second_loss_while_setting_up_is_replaced_with_nothing_to_save() -> None:
    job = training_gang(3).model_copy(update={"substatus": S.INSTALLING_REQUIREMENTS})
    job = lose(lose(job, N1), N0, seconds=20)
    assert (job.attempt, job.substatus) == (1, S.REPLACING_NODE)
    assert job.replacing is not None and job.replacing.setting_up == S.INSTALLING_REQUIREMENTS
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R0_LATER, 1)
    assert regroup(job, at(21)).substatus == S.INSTALLING_REQUIREMENTS


def test_a_lost_node_zeros_late_copy_of_an_older_stop_is_not_its_save() -> None:
    """Node 0 lost second, reported by the log sink; a copy of its stop from
    before the gang's last regroup is not the save at this stop."""
    job = node_replacement.stopped(lose(training_gang(3), N1), N0, 1, 40, None, generation=0)
    job = regroup(node_replacement.booted(job, R1, 1), at(12))
    assert job.gang_generation == 1
    job = lose(job, N2, seconds=30)
    job = lose(job, N0, seconds=40, saved=False)
    assert job.replacing is not None and not job.replacing.saved
    assert not node_replacement.stopped(job, N0, 1, 40, None, generation=0).replacing.saved  # type: ignore[union-attr]
    assert node_replacement.stopped(job, N0, 1, 90, None, generation=1).replacing.saved  # type: ignore[union-attr]
    assert R0 not in job.nodes


N3 = "sl-job1-a1-n3"
R0_SHRUNK = "sl-job1-a1-n0-g3"  # named for the generation the gang grows back at


def four_shrunk() -> JobDoc:
    """A 4-node elastic gang (``min_nodes`` 2) lost node 1 at step 40: nodes
    0, 2 and 3 train on at generation 2, node 0 their head."""
    job = lose(training_gang(4, min_nodes=2), N1)
    return regroup(stop(job, N0, 40, generation=0), at(12))


def test_the_smaller_gangs_head_lost_shrinks_again_with_the_next_node_as_head() -> None:
    job = lose(four_shrunk(), N0, seconds=30, step=60, saved=True)
    assert (job.substatus, job.attempt, job.preemptions) == (S.REPLACING_NODE, 1, 2)
    assert job.nodes == [R0_SHRUNK, R1, N2, N3] and job.attempts[0].checkpoint_step == 60
    assert job.instance == R0_SHRUNK  # node 0 follows the node list, as for any replacement
    planned = node_replacement.plan(job, at(31))  # its own report after its save
    assert planned is not None and planned.shrink
    assert (planned.nodes, planned.generation) == ((N2, N3), 3)
    job = node_replacement.regrouped(job, planned, at(31))
    assert (job.substatus, job.resizes) == (S.TRAINING, 2)
    assert gang_resize.head(job) == N2
    # Both replacements up: the smaller gang's new head saves at the stop to grow back.
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R0_SHRUNK, 1)
    job = stop(gang_resize.grow_asked(job, at(50)), N2, 90, generation=3)
    planned = node_replacement.plan(job, at(51))
    assert planned is not None and not planned.shrink
    assert (planned.nodes, planned.generation) == ((R0_SHRUNK, R1, N2, N3), 4)
    job = node_replacement.regrouped(job, planned, at(51))
    assert (job.substatus, job.replacing, job.attempt, job.resizes) == (S.TRAINING, None, 1, 3)


def test_the_smaller_gangs_head_lost_by_the_log_sink_shrinks_once_it_saved() -> None:
    job = lose(four_shrunk(), N0, seconds=30, saved=False)
    assert node_replacement.plan(job, at(31)) is None
    assert node_replacement.plan(job, at(30 + 60)) is not None  # its notice is over
    saved = node_replacement.lost_node_saved(job, N0, 1)
    planned = node_replacement.plan(saved, at(31))
    assert planned is not None and planned.nodes == (N2, N3)
    # A survivor's stop is not the lost head's save.
    assert node_replacement.plan(stop(job, N2, None, generation=2), at(31)) is None


def test_the_smaller_gangs_head_lost_with_too_few_left_waits_for_every_replacement() -> None:
    job = lose(training_gang(3, min_nodes=2), N1)
    job = regroup(stop(job, N0, 40, generation=0), at(12))
    assert job.replacing is not None and job.replacing.shrunk == [N0, N2]
    job = lose(job, N0, seconds=30, saved=True)
    assert (job.substatus, job.attempt) == (S.REPLACING_NODE, 1)
    assert job.replacing is not None and job.replacing.shrunk == [N2]


def test_the_next_node_lost_after_the_smaller_gangs_head_is_not_the_saver() -> None:
    """The head lost (only the log sink said so), then the next node, whose
    agent reports after its own stop: that is not the head's save."""
    n4 = "sl-job1-a1-n4"
    job = lose(training_gang(5, min_nodes=2), N1)
    job = regroup(stop(job, N0, 40, generation=0), at(12))
    assert job.replacing is not None and job.replacing.shrunk == [N0, N2, N3, n4]
    job = lose(job, N0, seconds=30, saved=False)
    job = lose(job, N2, seconds=31, saved=True)
    assert (job.substatus, job.attempt) == (S.REPLACING_NODE, 1)
    assert node_replacement.plan(job, at(32)) is None
    planned = node_replacement.plan(node_replacement.lost_node_saved(job, N0, 1), at(32))
    assert planned is not None and planned.nodes == (N3, n4)
