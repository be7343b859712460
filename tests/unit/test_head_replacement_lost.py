"""Node 0 lost (the log sink's report, at its notice's start), then its
replacement lost before it joined: the gang regroups as soon as node 0's
save is known complete (its agent's report after saving, or its stop
report heard late), not at its notice's end; never before it, whatever the
replacements or the survivors report. Pure: no emulator."""

from __future__ import annotations

import pytest

from spotline.shared.domain import node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import StaleEvent
from spotline.shared.domain.states import JobSubstatus
from tests.unit.test_further_losses import N3, R0_LATER, R0_SHRUNK, four_shrunk, waiting_gang
from tests.unit.test_node_replacement import N0, N1, N2, R0, R1, at, lose, training_gang

S = JobSubstatus
R0_AGAIN = "sl-job1-a1-n0-g2-1"  # node 0's replacement after the first was lost
NOTICE_OVER = 10 + 45  # node 0 lost at 10 s: its notice (30 s) and margin (15 s) are over


def head_replacement_lost() -> JobDoc:
    """A 3-node gang lost node 0 at 10 s (the log sink's report: not saved
    yet); its replacement booted, then was lost at 20 s; the next one is up."""
    job = lose(training_gang(3), N0, saved=False)
    job = lose(node_replacement.booted(job, R0, 1), R0, seconds=20)
    assert (job.substatus, job.attempt, job.nodes) == (S.REPLACING_NODE, 1, [R0_AGAIN, N1, N2])
    return node_replacement.booted(job, R0_AGAIN, 1)


def test_node_zeros_agent_report_after_its_save_regroups_at_once() -> None:
    job = head_replacement_lost()
    assert node_replacement.plan(job, at(25)) is None
    with pytest.raises(StaleEvent):  # its agent's report: stale as a loss ...
        lose(job, N0, seconds=25, step=40, saved=True)
    saved = node_replacement.lost_node_saved(job, N0, 1)  # ... but its save is complete
    planned = node_replacement.plan(saved, at(25))
    assert planned is not None and planned.nodes == (R0_AGAIN, N1, N2)


def test_node_zeros_stop_report_heard_late_regroups_at_once() -> None:
    job = node_replacement.stopped(head_replacement_lost(), N0, 1, 40, None, generation=0)
    assert job.attempts[0].checkpoint_step == 40
    planned = node_replacement.plan(job, at(25))
    assert planned is not None and planned.nodes == (R0_AGAIN, N1, N2)


def test_nothing_but_node_zeros_save_or_its_notices_end_lets_it_regroup() -> None:
    job = head_replacement_lost()
    # The lost replacement's own reports: it never trained, and saved nothing.
    for reported in (
        node_replacement.lost_node_saved(job, R0, 1),
        node_replacement.stopped(job, R0, 1, 50, None, generation=1),
        node_replacement.stopped(job, R0_AGAIN, 1, 50, None, generation=2),
        node_replacement.stopped(job, N1, 1, None, None, generation=0),  # a survivor's
        node_replacement.lost_node_saved(job, N0, 2),  # another attempt's
        node_replacement.stopped(job, N0, 1, 9, None, generation=-1),  # an older stop's
    ):
        assert node_replacement.plan(reported, at(NOTICE_OVER - 1)) is None
    assert node_replacement.plan(job, at(NOTICE_OVER)) is not None


def test_node_zeros_save_still_counts_after_its_replacement_was_lost_twice() -> None:
    job = lose(head_replacement_lost(), R0_AGAIN, seconds=30)
    again = job.nodes[0]
    assert again == "sl-job1-a1-n0-g3-2"
    job = node_replacement.booted(node_replacement.lost_node_saved(job, N0, 1), again, 1)
    planned = node_replacement.plan(job, at(31))
    assert planned is not None and planned.nodes == (again, N1, N2)


def test_node_zero_lost_second_then_its_replacement_regroups_on_its_save() -> None:
    """Node 1 lost first, node 0 second (the log sink's report), then node
    0's replacement: node 0's agent report after its save is the one."""
    job = lose(lose(training_gang(3), N1), N0, seconds=20, saved=False)
    job = lose(node_replacement.booted(job, R0_LATER, 1), R0_LATER, seconds=30)
    again = job.nodes[0]
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), again, 1)
    assert node_replacement.plan(job, at(31)) is None
    planned = node_replacement.plan(node_replacement.lost_node_saved(job, N0, 1), at(31))
    assert planned is not None and planned.nodes == (again, R1, N2)


def test_node_zeros_stop_reported_before_its_loss_still_counts() -> None:
    job = waiting_gang()  # node 0's stop at step 40 heard, then node 1 lost
    job = lose(job, N0, seconds=20, saved=False)
    job = lose(node_replacement.booted(job, R0_LATER, 1), R0_LATER, seconds=30)
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), job.nodes[0], 1)
    assert node_replacement.plan(job, at(31)) is not None


def test_an_elastic_gangs_lost_head_saves_after_its_replacement_was_lost() -> None:
    """The smaller gang's head lost (the log sink's report), then its
    replacement: the others shrink again on the head's own report of its save."""
    job = lose(four_shrunk(), N0, seconds=30, saved=False)
    job = lose(job, R0_SHRUNK, seconds=35)
    assert (job.substatus, job.attempt, job.preemptions) == (S.REPLACING_NODE, 1, 3)
    assert node_replacement.plan(job, at(36)) is None
    assert (
        node_replacement.plan(node_replacement.lost_node_saved(job, R0_SHRUNK, 1), at(36)) is None
    )
    planned = node_replacement.plan(node_replacement.lost_node_saved(job, N0, 1), at(36))
    assert planned is not None and planned.shrink and planned.nodes == (N2, N3)
