"""A gang that loses a node while it sets up (booting, fetching, installing:
no node has reported training) replaces that node rather than relaunching
(``spotline.shared.domain.node_replacement``): nothing was trained, so no
save is waited for; the gang regroups once the replacement is up and goes
on setting up. Pure: no emulator."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from spotline.shared.contract.events import EpochDone
from spotline.shared.domain import lifecycle, node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.transitions import move_job
from tests.unit.test_node_replacement import (
    N0,
    N1,
    N2,
    R0,
    R1,
    T0,
    at,
    lose,
    regroup,
    training_gang,
)

S = JobSubstatus
SETTING_UP = [S.CONNECTING_SERVER, S.GEARING_UP_ENV, S.SENDING_MODEL_AND_DATA]


def setting_up_gang(nodes: int = 2, **spec: Any) -> JobDoc:
    """A gang placed and setting up: it installs its requirements, no node trains."""
    job = training_gang(nodes, **spec)
    placed = job.model_copy(update={"substatus": S.CONNECTING_SERVER, "history": job.history[:-1]})
    return move_job(placed, S.INSTALLING_REQUIREMENTS, at(2))


@pytest.mark.parametrize("phase", [*SETTING_UP, S.INSTALLING_REQUIREMENTS])
def test_a_node_lost_while_the_gang_sets_up_is_replaced_with_nothing_to_save(
    phase: JobSubstatus,
) -> None:
    job = setting_up_gang().model_copy(update={"substatus": phase})
    lost = lose(job, N1)
    assert (lost.status, lost.substatus, lost.attempt) == (
        JobStatus.RECOVERING,
        S.REPLACING_NODE,
        1,
    )
    assert lost.nodes == [N0, R1] and lost.gang_generation == 1
    assert lost.replacing is not None and lost.replacing.setting_up == phase
    assert node_replacement.save_complete(lost, at(10))  # nothing was trained
    assert not node_replacement.ready(lost, at(10))  # the replacement is not up
    up = node_replacement.booted(lost, R1, 1)
    regrouped = regroup(up, at(20))
    # Back to setting up where it was, on the same attempt; the timeline shows the wait.
    assert (regrouped.substatus, regrouped.replacing, regrouped.attempt) == (phase, None, 1)
    assert regrouped.gang_generation == 1 and regrouped.preemptions == 1
    beat = lifecycle.advance(regrouped, S.TRAINING, at(30))
    assert beat.substatus == S.TRAINING


def test_a_lost_node_zero_while_setting_up_makes_the_replacement_the_head_at_once() -> None:
    job = lose(setting_up_gang(3), N0)  # the log sink's report: no save of its own to wait for
    assert job.nodes[0] == R0 and job.instance == R0
    up = node_replacement.booted(job, R0, 1)
    assert node_replacement.ready(up, at(11))  # not the notice's end: nothing to save


def test_an_epoch_heard_while_replacing_means_the_gang_was_training_after_all() -> None:
    """The gang's training reports were still in flight when the loss came:
    node 0's save at the gang's stop is waited for, as for a training gang."""
    job = node_replacement.booted(lose(setting_up_gang(), N1), R1, 1)
    epoch = EpochDone(
        job_id="job1", attempt=1, instance=N0, sent_at=T0, token="t",
        epoch=1, epochs=4, step=10, metrics={},
    )  # fmt: skip
    trained = node_replacement.trained(lifecycle.epoch_done(job, epoch, at(12)))
    assert trained.replacing is not None and trained.replacing.setting_up is None
    assert not node_replacement.ready(trained, at(13))
    saved = node_replacement.stopped(trained, N0, 1, 12, "gs://b/12")
    assert regroup(saved, at(14)).substatus == S.TRAINING


def test_a_lost_node_that_reports_a_save_was_training() -> None:
    job = lose(setting_up_gang(), N0, step=12, saved=True)
    assert job.replacing is not None and job.replacing.setting_up is None
    assert job.replacing.saved  # its own save, reported


def test_a_second_loss_is_replaced_too_and_the_bound_relaunches_a_setting_up_gang() -> None:
    job = lose(setting_up_gang(3), N1)
    again = lose(job, N0, seconds=20)
    assert (again.attempt, again.substatus, again.preemptions) == (1, S.REPLACING_NODE, 2)
    bound = job.spec.replace_node_timeout_s
    assert node_replacement.overdue(job, at(10) + timedelta(seconds=bound))


def test_a_gang_that_cannot_replace_still_relaunches_on_a_loss_while_setting_up() -> None:
    job = lose(setting_up_gang(replace_node_timeout_s=0), N1)
    assert (job.attempt, job.replacing) == (2, None)


def test_a_loss_while_requesting_is_no_nodes_loss() -> None:
    job = setting_up_gang().model_copy(update={"substatus": S.REQUESTING_SERVER})
    assert not node_replacement.replaces(job, N1, 1, S.PREEMPTED)


def test_an_elastic_gang_that_loses_a_node_as_it_sets_up_waits_for_the_replacement() -> None:
    """No smaller gang trains meanwhile: the others are still setting up as
    the replacement boots, and the gang regroups whole once it is up."""
    job = lose(setting_up_gang(3, min_nodes=2), N1)
    assert node_replacement.plan(job, at(11)) is None
    up = node_replacement.booted(job, R1, 1)
    planned = node_replacement.plan(up, at(12))
    assert planned is not None and not planned.shrink and len(planned.nodes) == 3


def test_a_lost_node_whose_trainer_never_started_leaves_nothing_to_save() -> None:
    """The job reads TRAINING (the others' trainers started), but the lost
    node's never did: no step was taken, the others' ranks wait in their
    rendezvous with it, and no save of node 0's will come."""
    job = lose(training_gang(), N1, started=False)
    assert job.replacing is not None and job.replacing.setting_up == S.TRAINING
    up = node_replacement.booted(job, R1, 1)
    assert regroup(up, at(12)).substatus == S.TRAINING


def test_a_stop_with_the_gang_heard_while_replacing_means_it_was_training() -> None:
    job = node_replacement.booted(
        lose(setting_up_gang(3), N2, started=False), "sl-job1-a1-n2-g1", 1
    )
    stopped = node_replacement.stopped(job, N1, 1, None, None, 0)
    assert stopped.replacing is not None and stopped.replacing.setting_up is None
    assert not node_replacement.ready(stopped, at(12))
    saved = node_replacement.stopped(stopped, N0, 1, 12, "gs://b/12", 0)
    assert node_replacement.ready(saved, at(13))
