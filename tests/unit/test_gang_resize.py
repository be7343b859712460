"""An elastic gang (``min_nodes``) trains on at a smaller size while its lost
node is replaced, and grows back when the replacement joins
(``spotline.shared.domain.gang_resize``): the orders of events, each ending
in a defined state. Pure: no emulator."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from spotline.shared.contract.events import JobFinished
from spotline.shared.domain import gang_resize, lifecycle, node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.timeline import Phase, timeline
from tests.unit.test_node_replacement import N0, N1, N2, R0, R1, at, lose, regroup, training_gang

S = JobSubstatus


def elastic_gang(**spec: Any) -> JobDoc:
    return training_gang(3, **({"min_nodes": 2} | spec))


def shrunk_gang() -> JobDoc:
    """Node 1 lost at step 40, node 0's save complete: the other two train on."""
    job = node_replacement.stopped(lose(elastic_gang(), N1), N0, 1, 40, "gs://b/ckpt-40", 0)
    return regroup(job, at(12))


def stop(job: JobDoc, name: str, step: int | None, generation: int) -> JobDoc:
    return node_replacement.stopped(job, name, 1, step, None, generation)


def test_the_survivors_train_on_at_the_smaller_size_once_node_zeros_save_is_complete() -> None:
    job = lose(elastic_gang(), N1)
    assert node_replacement.plan(job, at(11)) is None  # node 0 still saving
    job = stop(job, N0, 40, generation=0)
    planned = node_replacement.plan(job, at(12))
    assert planned is not None and planned.shrink
    assert (planned.nodes, planned.base, planned.generation) == ((N0, N2), 1, 2)
    job = node_replacement.regrouped(job, planned, at(12))
    assert (job.status, job.substatus, job.attempt) == (JobStatus.TRAINING, S.TRAINING, 1)
    assert job.replacing is not None and job.replacing.shrunk == [N0, N2]
    assert (job.gang_generation, job.resizes, job.nodes) == (2, 1, [N0, R1, N2])
    assert "trains on at 2 of 3 nodes" in job.history[-1].note
    assert node_replacement.regrouped(job, planned, at(13)) == job  # recorded twice: once


def test_the_gang_grows_back_from_the_smaller_gangs_save_once_the_replacement_is_up() -> None:
    job = node_replacement.booted(shrunk_gang(), R1, 1)
    assert gang_resize.grows(job)
    assert node_replacement.plan(job, at(20)) is None  # not asked to stop yet
    job = gang_resize.grow_asked(job, at(20))
    assert job.substatus == S.REPLACING_NODE and not gang_resize.grows(job)
    assert gang_resize.grow_asked(job, at(21)) is job
    # The smaller gang's other node, and a late copy of node 0's first stop: no save of it.
    job = stop(job, N2, None, generation=2)
    job = stop(job, N0, 40, generation=0)
    assert node_replacement.plan(job, at(22)) is None
    job = stop(job, N0, 75, generation=2)
    planned = node_replacement.plan(job, at(23))
    assert planned is not None and not planned.shrink
    assert (planned.nodes, planned.generation) == ((N0, R1, N2), 3)
    job = node_replacement.regrouped(job, planned, at(23))
    assert (job.substatus, job.replacing, job.gang_generation, job.resizes) == (
        S.TRAINING,
        None,
        3,
        2,
    )
    assert job.attempts[0].checkpoint_step == 75  # the grown gang resumes from here
    assert "grows back to 3 nodes" in job.history[-1].note
    assert job.preemptions == 1 and job.attempt == 1


def test_a_replacement_up_before_node_zeros_save_joins_at_once_with_no_resize() -> None:
    job = node_replacement.booted(lose(elastic_gang(), N1), R1, 1)
    job = regroup(stop(job, N0, 40, generation=0), at(12))
    assert (job.substatus, job.replacing, job.gang_generation, job.resizes) == (
        S.TRAINING,
        None,
        1,
        0,
    )


def test_a_shrink_told_as_the_replacement_boots_is_still_recorded_then_grows() -> None:
    job = stop(lose(elastic_gang(), N1), N0, 40, generation=0)
    planned = node_replacement.plan(job, at(12))
    assert planned is not None and planned.shrink
    # The survivors were told; the replacement's boot is recorded before the shrink.
    job = node_replacement.regrouped(node_replacement.booted(job, R1, 1), planned, at(13))
    assert job.replacing is not None and job.replacing.shrunk == [N0, N2]
    assert gang_resize.grows(job)


def test_without_min_nodes_the_survivors_wait() -> None:
    job = stop(lose(training_gang(3), N1), N0, 40, generation=0)
    assert node_replacement.plan(job, at(12)) is None


def test_a_lost_node_zero_hands_the_smaller_gang_to_node_one_whose_finish_ends_the_job() -> None:
    job = regroup(lose(elastic_gang(), N0, step=12, saved=True), at(12))
    assert job.replacing is not None and job.replacing.shrunk == [N1, N2]
    assert gang_resize.head(job) == N1 and job.instance == R0
    worker = JobFinished(job_id="job1", attempt=1, instance=N2, sent_at=at(30), exit_code=0)
    assert lifecycle.finished(job, worker, at(30)).status == JobStatus.TRAINING
    done = JobFinished(job_id="job1", attempt=1, instance=N1, sent_at=at(30), exit_code=0)
    assert lifecycle.finished(job, done, at(30)).status == JobStatus.COMPLETED


def test_a_lost_node_zero_whose_save_is_not_reported_shrinks_once_its_notice_is_over() -> None:
    job = lose(elastic_gang(), N0)
    assert node_replacement.plan(job, at(20)) is None
    planned = node_replacement.plan(job, at(10 + 60))
    assert planned is not None and planned.nodes == (N1, N2)
    job = node_replacement.booted(node_replacement.regrouped(job, planned, at(70)), R0, 1)
    job = gang_resize.grow_asked(job, at(80))
    assert node_replacement.plan(job, at(200)) is None  # the notice rule is not the stop's save
    job = stop(job, N1, 90, generation=2)
    assert node_replacement.plan(job, at(201)) is not None


def test_a_survivors_loss_below_min_nodes_while_the_smaller_gang_trains_keeps_the_rest() -> None:
    job = lose(shrunk_gang(), N2, seconds=30)
    assert (job.substatus, job.attempt, job.preemptions) == (S.REPLACING_NODE, 1, 2)
    assert job.replacing is not None and job.replacing.shrunk == [N0]
    assert job.resizes == 1


def test_the_bound_does_not_run_while_the_smaller_gang_trains_and_restarts_at_the_ask() -> None:
    job = shrunk_gang()  # replace_node_timeout_s: 300 from the loss at 10 s
    assert not node_replacement.overdue(job, at(10 + 1000))
    job = gang_resize.grow_asked(node_replacement.booted(job, R1, 1), at(1000))
    assert not node_replacement.overdue(job, at(1000 + 299))
    assert node_replacement.overdue(job, at(1000 + 300))
    job = node_replacement.abandon(job, at(1300), "no regroup")
    assert (job.substatus, job.attempt) == (S.REQUESTING_SERVER, 2)


def test_a_survivors_non_zero_exit_while_the_smaller_gang_trains_relaunches_the_gang() -> None:
    crashed = JobFinished(
        job_id="job1", attempt=1, instance=N2, sent_at=at(30), exit_code=1, log_tail="nccl"
    )
    job = lifecycle.finished(shrunk_gang(), crashed, at(30))
    assert (job.status, job.attempt, job.error) == (JobStatus.RECOVERING, 2, None)


def test_the_smaller_gangs_training_is_training_time_and_the_waits_are_waits() -> None:
    job = node_replacement.booted(shrunk_gang(), R1, 1)  # waited 10 s to 12 s
    job = gang_resize.grow_asked(job, at(100))
    job = regroup(stop(job, N0, 75, generation=2), at(110))
    totals = timeline(job.history, now=at(120)).totals()
    assert totals[Phase.WAITING_FOR_NODE] == 2.0 + 10.0


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"min_nodes": 3}, "not below nodes (3)"),
        ({"min_nodes": 0}, "min_nodes"),
        ({"min_nodes": 2, "replace_node_timeout_s": 0}, "replace_node_timeout_s is 0"),
        (
            {"min_nodes": 2, "framework": "xgboost", "trainer": None, "command": ["x"]},
            "a xgboost gang cannot change its size",
        ),
    ],
    ids=["not-below", "zero", "never-replaced", "xgboost"],
)
def test_a_min_nodes_that_cannot_work_is_refused_saying_why(
    spec: dict[str, Any], says: str
) -> None:
    fields = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}
    with pytest.raises(ValidationError, match="min_nodes") as err:
        JobSpec(**fields | {"nodes": 3} | spec)
    assert says in str(err.value)
