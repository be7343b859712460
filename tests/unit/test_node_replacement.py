"""A gang loses one node, not its attempt (``spotline.shared.domain.node_replacement``):
the orders of events around a replaced node, each ending in a defined state.
Pure: no emulator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.shared.contract.events import Heartbeat, JobFinished
from spotline.shared.domain import lifecycle, node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import StaleEvent, new_job, vm_recorded
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.timeline import Phase, timeline
from spotline.shared.domain.transitions import move_job

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
S = JobSubstatus
N0, N1, N2 = "sl-job1-a1-n0", "sl-job1-a1-n1", "sl-job1-a1-n2"
R1 = "sl-job1-a1-n1-g1"  # node 1's first replacement
R0 = "sl-job1-a1-n0-g1"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def training_gang(nodes: int = 2, **spec: Any) -> JobDoc:
    fields: dict[str, Any] = {
        "user": "alice",
        "machine_ids": ["g2-standard-4"],
        "trainer": "digits_mlp",
        "epochs": 4,
        "nodes": nodes,
    }
    job = new_job(JobSpec(**fields | spec), "job1", "m1", T0)
    names = [f"sl-job1-a1-n{rank}" for rank in range(nodes)]
    job = vm_recorded(job, names[0], "us-central1-a", "g2-standard-4", at(1), 0.3, 1.0, nodes=names)
    return move_job(job, S.TRAINING, at(2))


def lose(job: JobDoc, name: str, seconds: float = 10, **kwargs: Any) -> JobDoc:
    return node_replacement.lost(
        job, name, job.attempt, S.PREEMPTED, at(seconds), f"{name} preempted", **kwargs
    )


def regroup(job: JobDoc, now: datetime) -> JobDoc:
    """The regroup the gang is ready for, told and recorded (the job as is: none)."""
    planned = node_replacement.plan(job, now)
    return job if planned is None else node_replacement.regrouped(job, planned, now)


def test_a_workers_preemption_keeps_the_attempt_and_names_a_replacement() -> None:
    job = lose(training_gang(), N1, step=40, checkpoint_uri="gs://b/ckpt-40")
    assert (job.status, job.substatus, job.attempt) == (JobStatus.RECOVERING, S.REPLACING_NODE, 1)
    assert job.nodes == [N0, R1] and job.instance == N0
    assert job.replacing is not None
    assert (job.replacing.rank, job.replacing.lost, job.replacing.replacement) == (1, N1, R1)
    assert (job.preemptions, job.gang_generation) == (1, 1)
    assert job.attempts[0].node_names == [N0, R1] and job.attempts[0].checkpoint_step == 40
    assert job.attempts[0].ended_at is None  # the attempt goes on
    # Node 0 survived: its stop report is what the regroup waits for.
    assert not job.replacing.saved


def test_node_zeros_preemption_moves_the_gangs_head_to_the_replacement() -> None:
    job = lose(training_gang(3), N0, step=12, saved=True)
    assert job.nodes == [R0, N1, N2] and job.instance == R0
    assert job.replacing is not None and job.replacing.saved  # its own report, after saving


def test_the_regroup_waits_for_the_boot_and_node_zeros_save_in_either_order() -> None:
    job = lose(training_gang(), N1)
    job = node_replacement.booted(job, R1, 1)
    assert not node_replacement.ready(job, at(11))
    assert regroup(job, at(11)) is job
    job = node_replacement.stopped(job, N0, 1, 40, "gs://b/ckpt-40")
    assert node_replacement.ready(job, at(12))
    job = regroup(job, at(12))
    assert (job.status, job.substatus, job.attempt, job.replacing) == (
        JobStatus.TRAINING,
        S.TRAINING,
        1,
        None,
    )
    assert job.gang_stops == [] and job.nodes == [N0, R1]
    assert regroup(job, at(13)) == job  # a second regroup: nothing


def test_node_zeros_stop_report_before_the_loss_counts() -> None:
    job = node_replacement.stopped(training_gang(), N0, 1, 40, None)
    job = node_replacement.booted(lose(job, N1), R1, 1)
    assert node_replacement.ready(job, at(11))


def test_a_lost_node_zero_reported_by_the_log_sink_waits_for_its_save_or_its_notice() -> None:
    job = node_replacement.booted(lose(training_gang(), N0, saved=False), R0, 1)
    assert not node_replacement.ready(job, at(12))
    assert node_replacement.ready(job, at(10 + 60))  # the notice and its margin are over
    saved = node_replacement.lost_node_saved(job, N0, 1)
    assert node_replacement.ready(saved, at(12))


def test_survivors_heartbeats_do_not_end_the_replacement() -> None:
    job = lose(training_gang(), N1)
    beat = Heartbeat(
        job_id="job1", attempt=1, instance=N0, sent_at=at(11), phase=S.TRAINING, step=40
    )
    assert lifecycle.heartbeat(job, beat, at(11)).substatus == S.REPLACING_NODE


@pytest.mark.parametrize("report", ["duplicate", "late-agent", "log-sink"])
def test_a_second_report_of_the_lost_node_is_stale(report: str) -> None:
    job = lose(training_gang(), N1)
    with pytest.raises(StaleEvent):
        lose(job, N1, seconds=12, step=41 if report == "late-agent" else None)
    assert job.substatus == S.REPLACING_NODE


def test_losing_every_node_while_replacing_relaunches_the_whole_gang() -> None:
    """Another node's loss is replaced too (``further_losses``), but not the
    last one left of the gang as it trained."""
    job = node_replacement.stopped(training_gang(2), N0, 1, 40, None)
    job = lose(job, N1)
    job = lose(job, N0, seconds=20)
    assert (job.status, job.substatus, job.attempt) == (
        JobStatus.RECOVERING,
        S.REQUESTING_SERVER,
        2,
    )
    assert (job.preemptions, job.replacing, job.nodes, job.gang_generation) == (2, None, [], 0)
    assert job.attempts[0].outcome == "preempted" and job.attempts[0].checkpoint_step == 40


def test_the_replacements_own_preemption_before_it_joins_is_replaced_again() -> None:
    job = node_replacement.booted(lose(training_gang(), N1), R1, 1)
    job = lose(job, R1, seconds=20)
    assert (job.substatus, job.attempt, job.preemptions) == (S.REPLACING_NODE, 1, 2)
    assert job.nodes == [N0, "sl-job1-a1-n1-g2-1"]


def test_a_replacement_that_joined_is_replaced_like_any_node() -> None:
    job = node_replacement.stopped(lose(training_gang(), N1), N0, 1, 40, None)
    job = regroup(node_replacement.booted(job, R1, 1), at(12))
    job = lose(job, R1, seconds=30)
    assert job.substatus == S.REPLACING_NODE and job.attempt == 1
    assert job.nodes == [N0, "sl-job1-a1-n1-g2"] and job.gang_generation == 2


def test_no_regroup_within_the_bound_relaunches_the_gang_counting_one_preemption() -> None:
    job = lose(training_gang(replace_node_timeout_s=120), N1)
    assert not node_replacement.overdue(job, at(10 + 119))
    assert node_replacement.overdue(job, at(10 + 120))
    job = node_replacement.abandon(job, at(130), "not joined within 120 s")
    assert (job.substatus, job.attempt, job.preemptions) == (S.REQUESTING_SERVER, 2, 1)
    assert "could not be replaced" in job.history[-2].note
    assert node_replacement.abandon(job, at(131), "again") is job


def test_a_survivors_non_zero_exit_while_replacing_relaunches_without_failing() -> None:
    job = lose(training_gang(max_restarts_on_errors=0), N1)
    crashed = JobFinished(
        job_id="job1", attempt=1, instance=N0, sent_at=at(11), exit_code=1, log_tail="peer"
    )
    job = lifecycle.finished(job, crashed, at(11))
    assert (job.status, job.attempt, job.preemptions, job.error) == (
        JobStatus.RECOVERING,
        2,
        1,
        None,
    )


def test_node_zeros_exit_zero_while_replacing_completes_the_job() -> None:
    job = lose(training_gang(), N1)
    done = JobFinished(job_id="job1", attempt=1, instance=N0, sent_at=at(11), exit_code=0)
    assert lifecycle.finished(job, done, at(11)).status == JobStatus.COMPLETED


@pytest.mark.parametrize(
    "spec",
    [
        {"replace_node_timeout_s": 0},
        {"max_preemptions": 0},
    ],
    ids=["off", "limit"],
)
def test_off_or_at_a_limit_the_loss_ends_the_attempt_as_before(spec: dict[str, Any]) -> None:
    job = lose(training_gang(**spec), N1)
    assert job.replacing is None and job.attempt == (1 if "max_preemptions" in spec else 2)


@pytest.mark.parametrize("framework", ["pytorch", "command", "xgboost", "ray", "jax", "tensorflow"])
def test_every_frameworks_gang_replaces_one_node(framework: str) -> None:
    spec: dict[str, Any] = {
        "framework": framework,
        "trainer": None,
        "command": ["python", "train.py"],
    }
    job = lose(training_gang(**spec), N1)
    assert (job.replacing is not None, job.attempt) == (True, 1)


def test_a_gang_not_training_is_relaunched_whole() -> None:
    job = move_job(training_gang(), S.RETURNING, at(3))
    assert lose(job, N1).attempt == 2


def test_the_survivors_wait_is_a_phase_of_its_own() -> None:
    job = node_replacement.stopped(lose(training_gang(), N1), N0, 1, 40, None)
    job = regroup(node_replacement.booted(job, R1, 1), at(70))
    totals = timeline(job.history, now=at(100)).totals()
    assert totals[Phase.WAITING_FOR_NODE] == 60.0
    assert job.phase_seconds["waiting_for_node"] == 60.0


def test_the_attempt_record_names_the_replacement_and_its_logs_query_finds_it() -> None:
    names = [N0, N1]
    job = new_job(training_gang().spec, "job1", "m1", T0)
    job = vm_recorded(
        job, N0, "us-central1-a", "g2-standard-4", at(1), 0.3, 1.0, "100",
        nodes=names, node_ids=["100", "101"],
    )  # fmt: skip
    job = lose(move_job(job, S.TRAINING, at(2)), N1)
    placed = node_replacement.placed(job, R1, "201", at(11))
    assert node_replacement.placed(placed, R1, "201", at(12)) == placed  # recorded once
    [record] = placed.attempts
    assert record.node_names == [N0, R1] and record.node_ids == ["100", "201"]
    [swap] = record.replaced_nodes
    assert (swap.rank, swap.lost, swap.lost_instance_id) == (1, N1, "101")
    assert (swap.replacement, swap.instance_id, swap.at) == (R1, "201", at(11))
    # The lost node's lines and the replacement's: both the attempt's.
    query = record.logs_query or ""
    assert all(f'"{i}"' in query for i in ("100", "101", "201")), query
    assert 'jsonPayload.job_id="job1" AND jsonPayload.attempt=1' in query
    # The replacement joins, then is lost too: its own replacement is named as well.
    joined = regroup(
        node_replacement.booted(node_replacement.stopped(placed, N0, 1, 40, None), R1, 1), at(20)
    )
    again = node_replacement.placed(lose(joined, R1, 30), "sl-job1-a1-n1-g2", "301", at(31))
    [record] = again.attempts
    assert [(s.lost, s.lost_instance_id, s.instance_id) for s in record.replaced_nodes] == [
        (N1, "101", "201"),
        (R1, "201", "301"),
    ]
    assert all(f'"{i}"' in (record.logs_query or "") for i in ("100", "101", "201", "301"))


def test_a_replacement_of_a_record_without_node_ids_is_found_by_its_labels() -> None:
    placed = node_replacement.placed(lose(training_gang(), N1), R1, "201", at(11))
    [record] = placed.attempts
    assert record.replaced_nodes[0].instance_id == "201"
    assert "instance_id" not in (record.logs_query or "")
    assert 'jsonPayload.job_id="job1" AND jsonPayload.attempt=1' in (record.logs_query or "")


def test_a_late_copy_of_node_zeros_last_stop_does_not_count_as_its_next_save() -> None:
    """Node 0's stop for the first loss comes again after the gang regrouped
    (Pub/Sub redelivers late); then the replacement is lost too. The second
    regroup must wait for node 0's save at the second stop: a copy of the
    first one is not it (the new replacement would restore the older save)."""
    job = node_replacement.stopped(lose(training_gang(), N1, step=40), N0, 1, 40, None)
    job = regroup(node_replacement.booted(job, R1, 1), at(12))
    assert job.substatus == S.TRAINING
    job = node_replacement.stopped(job, N0, 1, 40, None, generation=0)  # the late copy
    job = lose(job, R1, seconds=60)
    assert job.replacing is not None and not job.replacing.saved
    job = node_replacement.booted(job, "sl-job1-a1-n1-g2", 1)
    assert not node_replacement.ready(job, at(61))
    job = node_replacement.stopped(job, N0, 1, 90, None, generation=1)  # node 0's new save
    assert node_replacement.ready(job, at(62))


def test_node_zeros_stop_before_the_loss_it_is_for_still_counts() -> None:
    """Generation by generation: node 0's stop for the second loss, heard
    before that loss (its generation is the gang's), is that loss's save."""
    job = node_replacement.stopped(lose(training_gang(), N1), N0, 1, 40, None, generation=0)
    job = regroup(node_replacement.booted(job, R1, 1), at(12))
    job = node_replacement.stopped(job, N0, 1, 90, None, generation=1)
    job = lose(job, R1, seconds=60)
    assert job.replacing is not None and job.replacing.saved
    # A stop of an agent that does not say its generation counts, as before.
    job = node_replacement.stopped(lose(training_gang(), N1), N0, 1, 40, None)
    assert job.replacing is not None and job.replacing.saved
