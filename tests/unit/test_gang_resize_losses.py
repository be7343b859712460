"""An elastic gang training at its smaller size loses a node again
(``spotline.shared.domain.gang_resize``): the replacement before it joined
is replaced again while the smaller gang trains on, bounded by
``replace_node_timeout_s`` from the request to grow back. Pure: no emulator."""

from __future__ import annotations

from datetime import datetime

import pytest

from spotline.shared.domain import gang_resize, node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import StaleEvent
from spotline.shared.domain.states import JobSubstatus
from tests.unit.test_gang_resize import shrunk_gang, stop
from tests.unit.test_node_replacement import (
    N0,
    N1,
    N2,
    R1,
    at,
    lose,
    regroup,
    training_gang,
)

S = JobSubstatus
R1_AGAIN = "sl-job1-a1-n1-g3-1"


def test_a_replacement_lost_before_it_joins_is_replaced_while_the_smaller_gang_trains() -> None:
    job = lose(shrunk_gang(), R1, seconds=30)
    assert (job.substatus, job.attempt, job.preemptions, job.resizes) == (S.TRAINING, 1, 2, 1)
    replacing = job.replacing
    assert replacing is not None
    assert (replacing.rank, replacing.lost, replacing.replacement) == (1, R1, R1_AGAIN)
    assert (replacing.shrunk, replacing.booted, replacing.since) == ([N0, N2], False, at(10))
    assert job.nodes == [N0, R1_AGAIN, N2] and job.gang_generation == 2
    with pytest.raises(StaleEvent):  # a late copy of its loss: recorded already
        lose(job, R1, seconds=31)
    # A second loss of it: yet another name, never one asked for before.
    again = lose(job, R1_AGAIN, seconds=40)
    assert again.replacing is not None and again.replacing.replacement == "sl-job1-a1-n1-g3-2"
    # The new replacement up: the smaller gang grows back from its own save.
    job = gang_resize.grow_asked(node_replacement.booted(job, R1_AGAIN, 1), at(50))
    job = stop(job, N0, 75, generation=2)
    planned = node_replacement.plan(job, at(51))
    assert planned is not None and planned.nodes == (N0, R1_AGAIN, N2)
    job = node_replacement.regrouped(job, planned, at(51))
    assert (job.substatus, job.replacing, job.resizes, job.gang_generation) == (
        S.TRAINING,
        None,
        2,
        3,
    )


def test_a_replacement_lost_after_the_ask_to_grow_is_replaced_within_the_same_bound() -> None:
    """The smaller gang stops as asked and waits for the new replacement;
    the bound still counts from the ask, not from this loss: a replacement
    lost each time just before it joins does not hold the gang for ever."""
    job = gang_resize.grow_asked(node_replacement.booted(shrunk_gang(), R1, 1), at(100))
    job = lose(job, R1, seconds=200)
    assert (job.substatus, job.attempt) == (S.REPLACING_NODE, 1)
    assert job.replacing is not None and job.replacing.replacement == R1_AGAIN
    assert job.replacing.since == at(100) and job.replacing.grow_asked
    job = stop(job, N0, 75, generation=2)
    assert node_replacement.plan(job, at(250)) is None  # the new one not up yet
    assert not node_replacement.overdue(job, at(399))
    assert node_replacement.overdue(job, at(400))
    late = node_replacement.plan(node_replacement.booted(job, R1_AGAIN, 1), at(260))
    assert late is not None and late.nodes == (N0, R1_AGAIN, N2)


def test_the_lost_node_itself_reported_late_changes_nothing_once_replaced_twice() -> None:
    job = lose(shrunk_gang(), R1, seconds=30)
    with pytest.raises(StaleEvent):
        lose(job, N1, seconds=31)


N3, R3 = "sl-job1-a1-n3", "sl-job1-a1-n3-g3"


def four_shrunk() -> JobDoc:
    """A 4-node gang (``min_nodes`` 2) lost node 1 at step 40: 3 train on."""
    job = lose(training_gang(4, min_nodes=2), N1)
    return regroup(stop(job, N0, 40, generation=0), at(12))


def test_a_second_node_lost_while_shrunk_shrinks_again_and_grows_back_once_both_are_up() -> None:
    job = lose(four_shrunk(), N3, seconds=30)
    assert (job.substatus, job.attempt, job.preemptions) == (S.REPLACING_NODE, 1, 2)
    assert job.nodes == [N0, R1, N2, R3] and job.gang_generation == 2
    assert node_replacement.plan(job, at(31)) is None  # node 0's save at this stop
    job = stop(job, N0, 60, generation=2)
    planned = node_replacement.plan(job, at(32))
    assert planned is not None and planned.shrink
    assert (planned.nodes, planned.generation) == ((N0, N2), 3)
    job = node_replacement.regrouped(job, planned, at(32))
    assert (job.substatus, job.resizes, job.gang_generation) == (S.TRAINING, 2, 3)
    # It grows back once every replacement is up: one stop and restart, not one each.
    job = node_replacement.booted(job, R3, 1)
    assert not gang_resize.grows(job)
    job = node_replacement.booted(job, R1, 1)
    assert gang_resize.grows(job)
    job = stop(gang_resize.grow_asked(job, at(50)), N0, 90, generation=3)
    planned = node_replacement.plan(job, at(51))
    assert planned is not None and not planned.shrink
    assert (planned.nodes, planned.generation) == ((N0, R1, N2, R3), 4)
    job = node_replacement.regrouped(job, planned, at(51))
    assert (job.substatus, job.replacing, job.resizes, job.attempt) == (S.TRAINING, None, 3, 1)
    assert job.attempts[0].checkpoint_step == 90


def test_a_second_loss_waits_for_its_save_within_the_bound_from_that_loss() -> None:
    job = lose(four_shrunk(), N2, seconds=30)
    assert job.replacing is not None and job.replacing.since == at(30)
    assert not node_replacement.overdue(job, at(329))
    assert node_replacement.overdue(job, at(330))


def test_a_late_stop_of_the_gang_before_the_second_shrink_is_not_its_save() -> None:
    job = lose(four_shrunk(), N3, seconds=30)
    job = node_replacement.regrouped(*_planned(stop(job, N0, 60, generation=2)))
    assert stop(job, N0, 60, generation=2).replacing == job.replacing  # the shrink's own
    assert node_replacement.plan(node_replacement.booted(job, R1, 1), at(40)) is None


def test_the_smaller_gangs_head_lost_is_replaced_and_the_rest_wait_for_its_save() -> None:
    """(``tests/unit/test_further_losses.py`` follows it on.)"""
    job = lose(four_shrunk(), N0, seconds=30)
    assert (job.substatus, job.attempt) == (S.REPLACING_NODE, 1)
    assert node_replacement.plan(job, at(31)) is None


def _planned(job: JobDoc) -> tuple[JobDoc, node_replacement.RegroupPlan, datetime]:
    planned = node_replacement.plan(job, at(32))
    assert planned is not None
    return job, planned, at(32)
