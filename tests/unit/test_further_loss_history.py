"""Each loss of a gang waiting for its replacement is a line in the job's
history and a job event, worded as the first loss's, exactly once: another
node's (``further_losses``), node 0's, a replacement's before it joined, an
elastic gang's asked to grow back. The survivors' idle phase still runs from
the first loss to the regroup. Pure: no emulator."""

from __future__ import annotations

from typing import Any

import pytest

from spotline.shared.domain import gang_resize, node_replacement
from spotline.shared.domain.documents import EpochDoc, JobDoc
from spotline.shared.domain.lifecycle import StaleEvent
from spotline.shared.domain.progress import eta_s
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.timeline import Phase, timeline
from tests.unit.test_further_losses import R0_LATER, R2, four_shrunk, waiting_gang
from tests.unit.test_node_replacement import N0, N1, N2, R1, at, lose, regroup

S = JobSubstatus
R1_AGAIN = "sl-job1-a1-n1-g2-1"  # node 1's replacement after the first was lost


def lines_of(job: JobDoc, name: str) -> list[str]:
    """The history's notes naming ``name``'s loss."""
    return [h.note for h in job.history if h.note.startswith(f"{name} preempted")]


def test_a_second_loss_is_a_line_worded_as_the_first_and_an_event() -> None:
    before = waiting_gang()
    job = lose(before, N2, seconds=20)
    first, second = job.history[-2], job.history[-1]
    assert first.note == f"{N1} preempted; replacing it with {R1}"
    assert before.pending_events[-1].preemptions == 1  # the first loss's event counts it too
    assert second.note == f"{N2} preempted; replacing it with {R2}"
    assert (second.at, second.status, second.substatus, second.attempt) == (
        at(20),
        job.status,
        S.REPLACING_NODE,
        1,
    )
    assert job.event_sequence == before.event_sequence + 1
    event = job.pending_events[-1]
    assert (event.sequence, event.substatus, event.previous_substatus) == (
        job.event_sequence,
        S.REPLACING_NODE,
        S.REPLACING_NODE,
    )
    assert (event.reason, event.at, event.preemptions) == (second.note, at(20), 2)


def test_node_zero_lost_second_is_a_line_naming_its_replacement() -> None:
    job = lose(waiting_gang(), N0, seconds=20, saved=True)
    assert job.history[-1].note == f"{N0} preempted; replacing it with {R0_LATER}"
    assert job.pending_events[-1].reason == job.history[-1].note


def test_the_replacement_lost_before_it_joined_is_a_line_too() -> None:
    job = lose(node_replacement.booted(waiting_gang(), R1, 1), R1, seconds=20)
    assert job.history[-1].note == f"{R1} preempted; replacing it with {R1_AGAIN}"
    assert (job.history[-1].substatus, job.pending_events[-1].preemptions) == (
        S.REPLACING_NODE,
        2,
    )


def test_an_elastic_gang_asked_to_grow_back_that_loses_a_node_says_so() -> None:
    job = node_replacement.booted(four_shrunk(), R1, 1)
    job = gang_resize.grow_asked(job, at(50))
    assert job.substatus == S.REPLACING_NODE
    job = lose(job, N2, seconds=55, saved=True)
    assert job.history[-1].note == f"{N2} preempted; replacing it with {job.nodes[2]}"
    assert job.history[-1].at == at(55)


def test_the_smaller_gangs_replacement_lost_as_it_trains_is_a_line_in_training() -> None:
    shrunk = four_shrunk()  # training on from 12 s
    job = lose(shrunk, R1, seconds=30)
    assert job.substatus == S.TRAINING
    assert job.history[-1].note == f"{R1} preempted; replacing it with {job.nodes[1]}"
    assert job.history[-1].substatus == S.TRAINING
    # The estimate keeps the smaller gang's pace: the line is no new start.
    epochs = [EpochDoc(epoch=1, epochs=4, attempt=1, step=10, instance=N0, at=at(42))]
    job, shrunk = (j.model_copy(update={"epoch": 1}) for j in (job, shrunk))
    assert eta_s(job, epochs, at(42)) == eta_s(shrunk, epochs, at(42)) == 3 * 30.0


@pytest.mark.parametrize("again", [{}, {"step": 41}, {"saved": True}, {"saved": False}], ids=str)
def test_a_redelivered_report_of_a_loss_adds_no_line_nor_event(again: dict[str, Any]) -> None:
    job = lose(waiting_gang(), N2, seconds=20, saved=False)
    with pytest.raises(StaleEvent):
        lose(job, N2, seconds=21, **again)
    # What the handlers do with a stale loss: the step kept, a lost head's save.
    late = node_replacement.lost_node_saved(job, N2, 1)
    late = node_replacement.stopped(late, N2, 1, 41, None, generation=0)
    assert lines_of(late, N2) == [f"{N2} preempted; replacing it with {R2}"]
    assert (late.event_sequence, late.pending_events) == (job.event_sequence, job.pending_events)


def test_the_survivors_idle_phase_runs_from_the_first_loss_to_the_regroup() -> None:
    job = lose(waiting_gang(), N2, seconds=20)
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R2, 1)
    job = regroup(job, at(70))
    assert job.substatus == S.TRAINING
    totals = timeline(job.history, now=at(100)).totals()
    assert totals[Phase.WAITING_FOR_NODE] == 60.0  # 10 s to 70 s: one wait, two lines
    assert job.phase_seconds["waiting_for_node"] == 60.0
    assert timeline(job.history, now=at(100)).seconds == 100.0  # nothing counted twice
