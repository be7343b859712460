"""A gang's node lost while the functions cannot tell whether the gang has
stepped with it since it was placed or last regrouped: only the log sink
reports a node lost after a regroup (its agent's generation unsaid), or a
worker is lost before its own TRAINING report arrives but after node 0's
epoch (``spotline.shared.domain.node_replacement``). The regroup waits for
the save the survivors stop to make, and only for one that will come.
Pure: no emulator."""

from __future__ import annotations

import pytest

from spotline.shared.contract.events import EpochDone
from spotline.shared.domain import late_epochs, node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobSubstatus
from tests.unit.test_node_replacement import N0, N1, N2, R1, at, lose, regroup, training_gang

S = JobSubstatus
R2 = "sl-job1-a1-n2-g2"  # node 2's replacement, after the gang's first regroup
NOTICE_OVER_S = 45  # the lost node's notice (30 s) and its margin (15 s)


def regrouped_gang() -> JobDoc:
    """A 3-node gang that lost node 1 at 10 s, node 0 saved at step 40, and
    regrouped around its replacement at 20 s (generation 1, TRAINING)."""
    job = node_replacement.stopped(training_gang(3), N0, 1, 40, None, generation=0)
    job = regroup(node_replacement.booted(lose(job, N1), R1, 1), at(20))
    assert (job.substatus, job.gang_generation, job.replacing) == (S.TRAINING, 1, None)
    return job


def epoch(job: JobDoc, instance: str, number: int, seconds: float) -> JobDoc:
    """An epoch of ``instance``'s heard, as the epoch handler applies it."""
    event = EpochDone(
        job_id="job1", attempt=1, instance=instance, sent_at=at(seconds),
        epoch=number, epochs=4, step=number * 25, checkpoint_uri=f"gs://b/{number}",
    )  # fmt: skip
    heard = late_epochs.epoch_done(job, event, at(seconds))
    return node_replacement.epoch_heard(heard, instance, event.step)


@pytest.mark.parametrize("reaper", [False, True], ids=["log-sink", "reaper"])
def test_a_node_lost_after_the_regroup_heard_only_from_the_log_sink_needs_no_new_save(
    reaper: bool,
) -> None:
    """Node 2's loss at 30 s, from the log sink alone (or the reaper's
    sight of its VM gone): had it rejoined, the gang's ranks would have
    stopped with it within its notice, node 0 saving; no stop heard by the
    notice's end, the gang never stepped since the regroup (its ranks wait
    in their rendezvous with node 2), and the save it regrouped from stands."""
    job = lose(regrouped_gang(), N2, seconds=30, saved=reaper)
    assert (job.substatus, job.attempt, job.nodes) == (S.REPLACING_NODE, 1, [N0, R1, R2])
    job = node_replacement.booted(job, R2, 1)
    assert node_replacement.plan(job, at(31)) is None  # its notice is not over
    # Before: the gang waited for a save of node 0's that never comes.
    job = regroup(job, at(30 + NOTICE_OVER_S))
    assert (job.substatus, job.attempt, job.gang_generation) == (S.TRAINING, 1, 2)
    assert job.attempts[0].checkpoint_step == 40


def test_a_stop_heard_after_that_loss_means_the_gang_stepped_and_waits_for_node_zeros() -> None:
    """A worker's stop with the gang (generation 1): node 2 had rejoined and
    the gang stepped, so node 0's save at that stop is waited for."""
    job = node_replacement.booted(lose(regrouped_gang(), N2, seconds=30), R2, 1)
    job = node_replacement.stopped(job, R1, 1, None, None, generation=1)
    assert node_replacement.plan(job, at(30 + NOTICE_OVER_S)) is None
    job = node_replacement.stopped(job, N0, 1, 52, "gs://b/52", generation=1)
    job = regroup(job, at(31 + NOTICE_OVER_S))
    assert (job.substatus, job.gang_generation) == (S.TRAINING, 2)
    assert job.attempts[0].checkpoint_step == 52


def test_an_epoch_since_the_regroup_means_the_gang_stepped_and_waits_for_node_zeros() -> None:
    job = epoch(regrouped_gang(), N0, 2, seconds=25)  # step 50, past the save at 40
    job = node_replacement.booted(lose(job, N2, seconds=30), R2, 1)
    assert node_replacement.plan(job, at(30 + NOTICE_OVER_S)) is None
    job = node_replacement.stopped(job, N0, 1, 52, "gs://b/52", generation=1)
    assert node_replacement.plan(job, at(31 + NOTICE_OVER_S)) is not None


def test_an_epoch_before_the_regroup_says_nothing_of_the_gang_since() -> None:
    """Node 0's epoch 1 (step 25), made before the stop the gang regrouped
    from (step 40), heard before or after the regroup."""
    job = epoch(training_gang(3), N0, 1, seconds=5)
    job = node_replacement.stopped(job, N0, 1, 40, None, generation=0)
    job = regroup(node_replacement.booted(lose(job, N1), R1, 1), at(20))
    job = epoch(job, N0, 1, seconds=25)  # a late copy
    job = node_replacement.booted(lose(job, N2, seconds=30), R2, 1)
    assert node_replacement.plan(job, at(30 + NOTICE_OVER_S)) is not None


def test_a_worker_lost_before_its_training_report_after_node_zeros_epoch_waits_for_its_stop() -> (
    None
):
    """Node 0's epoch was heard, node 1's TRAINING report was not (its
    instance still reads as launching): a step takes every node's ranks, so
    node 1's trainer ran, and the survivors stop with it, node 0 saving.
    The replacement's boot heard before node 0's stop must not regroup the
    gang against the older save."""
    job = epoch(training_gang(3), N0, 1, seconds=5)
    job = lose(job, N1, started=False)
    replacing = job.replacing
    assert replacing is not None and replacing.setting_up is None
    job = node_replacement.booted(job, R1, 1)
    # Before: the gang regrouped here, against epoch 1's save.
    assert node_replacement.plan(job, at(12)) is None
    job = node_replacement.stopped(job, N0, 1, 30, "gs://b/30", generation=0)
    job = regroup(job, at(13))
    assert (job.substatus, job.gang_generation) == (S.TRAINING, 1)
    assert job.attempts[0].checkpoint_step == 30


def test_a_worker_lost_before_any_epoch_whose_trainer_never_started_needs_no_save() -> None:
    """Unchanged: no epoch heard, the job reads TRAINING because the others'
    trainers started, but node 1's never did: no step, no save to wait for."""
    job = node_replacement.booted(lose(training_gang(3), N1, started=False), R1, 1)
    assert regroup(job, at(12)).substatus == S.TRAINING
