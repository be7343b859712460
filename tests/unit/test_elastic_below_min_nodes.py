"""An elastic gang (``min_nodes``) whose loss leaves fewer than ``min_nodes``
of its nodes: the survivors stay and wait (REPLACING_NODE) for every
replacement, as a gang without ``min_nodes`` does, and the gang regroups at
its full size; relaunched whole only at the bound, at ``max_preemptions``,
or with no survivor left (``spotline.shared.domain.gang_resize``). Pure: no
emulator."""

from __future__ import annotations

from typing import Any

from spotline.shared.domain import gang_resize, node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.timeline import Phase, timeline
from tests.unit.test_node_replacement import N0, N1, N2, R0, R1, at, lose, regroup, training_gang

S = JobSubstatus
N3 = "sl-job1-a1-n3"
R2 = "sl-job1-a1-n2-g3"  # node 2's replacement, named at the smaller gang's next generation
R3 = "sl-job1-a1-n3-g3"


def stop(job: JobDoc, name: str, step: int | None, generation: int) -> JobDoc:
    return node_replacement.stopped(job, name, 1, step, None, generation)


def shrunk(nodes: int = 3, **spec: Any) -> JobDoc:
    """Node 1 lost at 10 s (step 40), node 0's save complete: the rest train
    on at generation 2."""
    job = lose(training_gang(nodes, **({"min_nodes": nodes - 1} | spec)), N1)
    job = regroup(stop(job, N0, 40, generation=0), at(12))
    assert job.replacing is not None and job.substatus == S.TRAINING
    assert job.gang_generation == 2
    return job


def test_a_loss_below_min_nodes_while_the_smaller_gang_trains_keeps_the_survivors() -> None:
    job = lose(shrunk(), N2, seconds=30)
    assert (job.status, job.substatus, job.attempt) == (
        JobStatus.RECOVERING,
        S.REPLACING_NODE,
        1,
    )
    assert job.nodes == [N0, R1, R2] and job.instance == N0
    assert job.replacing is not None and job.replacing.shrunk == [N0]
    assert gang_resize.survivors(job) == [N0]
    assert (job.preemptions, job.resizes) == (2, 1)
    assert R2 in job.history[-1].note


def test_the_survivors_wait_for_every_replacement_then_the_gang_grows_back_whole() -> None:
    job = lose(shrunk(), N2, seconds=30)
    job = stop(job, N0, 75, generation=2)  # the smaller gang's save at N2's notice
    assert node_replacement.plan(job, at(40)) is None  # no replacement up
    job = node_replacement.booted(job, R1, 1)
    # N0 and R1 would make min_nodes, but the gang waits for every replacement.
    assert node_replacement.plan(job, at(50)) is None
    job = node_replacement.booted(job, R2, 1)
    planned = node_replacement.plan(job, at(60))
    assert planned is not None and not planned.shrink
    assert (planned.nodes, planned.base, planned.generation) == ((N0, R1, R2), 2, 3)
    job = node_replacement.regrouped(job, planned, at(60))
    assert (job.status, job.substatus, job.attempt, job.replacing) == (
        JobStatus.TRAINING,
        S.TRAINING,
        1,
        None,
    )
    assert (job.gang_generation, job.resizes, job.preemptions) == (3, 2, 2)
    assert job.attempts[0].checkpoint_step == 75  # the whole gang resumes from here
    assert "grows back to 3 nodes" in job.history[-1].note


def test_the_regroup_waits_for_the_survivors_save_at_the_second_loss() -> None:
    job = lose(shrunk(), N2, seconds=30)
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R2, 1)
    assert node_replacement.plan(job, at(40)) is None
    job = stop(job, N0, 40, generation=0)  # a late copy of its first stop: not this save
    assert node_replacement.plan(job, at(41)) is None
    job = stop(job, N0, 75, generation=2)
    planned = node_replacement.plan(job, at(42))
    assert planned is not None and planned.nodes == (N0, R1, R2)


def test_the_survivors_wait_is_charged_as_waiting_for_a_node() -> None:
    job = stop(lose(shrunk(), N2, seconds=30), N0, 75, generation=2)
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R2, 1)
    job = regroup(job, at(130))
    totals = timeline(job.history, now=at(140)).totals()
    assert totals[Phase.WAITING_FOR_NODE] == 2.0 + 100.0


def test_below_min_nodes_past_the_bound_the_gang_is_relaunched_whole() -> None:
    job = lose(shrunk(), N2, seconds=30)  # replace_node_timeout_s: 300 from this loss
    job = node_replacement.booted(stop(job, N0, 75, generation=2), R1, 1)
    assert not node_replacement.overdue(job, at(30 + 299))
    assert node_replacement.overdue(job, at(30 + 300))
    job = node_replacement.abandon(job, at(330), "no regroup")
    assert (job.substatus, job.attempt, job.replacing) == (S.REQUESTING_SERVER, 2, None)


def test_below_min_nodes_at_max_preemptions_the_job_ends_as_before() -> None:
    job = lose(shrunk(max_preemptions=1), N2, seconds=30)
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.FAILED, 1, 2)


def test_the_last_survivors_loss_relaunches_the_whole_gang() -> None:
    job = lose(lose(shrunk(), N2, seconds=30), N0, seconds=40)
    assert (job.substatus, job.attempt, job.preemptions) == (S.REQUESTING_SERVER, 2, 3)
    assert job.replacing is None


def test_a_four_node_gang_below_min_nodes_waits_for_both_replacements() -> None:
    job = lose(shrunk(4), N3, seconds=30)  # min_nodes 3: N0 and N2 are left
    assert job.substatus == S.REPLACING_NODE and job.attempt == 1
    assert job.replacing is not None and job.replacing.shrunk == [N0, N2]
    assert node_replacement.plan(stop(job, N0, 75, generation=2), at(40)) is None  # no shrink
    job = stop(stop(job, N2, None, generation=2), N0, 75, generation=2)
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R3, 1)
    planned = node_replacement.plan(job, at(60))
    assert planned is not None and planned.nodes == (N0, R1, N2, R3)


def test_the_smaller_gangs_head_lost_below_min_nodes_waits_for_its_save() -> None:
    # Node 0 lost first: nodes 1 and 2 train on, node 1 their head.
    job = regroup(lose(training_gang(3, min_nodes=2), N0, step=12, saved=True), at(12))
    assert job.replacing is not None and job.replacing.shrunk == [N1, N2]
    job = lose(job, N1, seconds=30)  # the log sink's report: its save not heard yet
    assert job.substatus == S.REPLACING_NODE and job.attempt == 1
    r1 = job.nodes[1]
    job = node_replacement.booted(node_replacement.booted(job, R0, 1), r1, 1)
    assert node_replacement.plan(job, at(40)) is None  # its save may be under way
    job = node_replacement.lost_node_saved(job, N1, 1)
    planned = node_replacement.plan(job, at(41))
    assert planned is not None and planned.nodes == (R0, r1, N2)


def test_two_nodes_noticed_at_once_the_second_heard_after_the_shrink_waits_for_both() -> None:
    """Nodes 1 and 2 get their notices together; node 2's loss is heard after
    node 0's save made the survivors shrink to nodes 0 and 2. Node 2's agent
    says it last ran at generation 0 (the first): it never joined the
    smaller gang, which never stepped, so the save at the first stop stands."""
    job = lose(shrunk(), N2, seconds=13, step=40, saved=True, generation=0)
    assert job.substatus == S.REPLACING_NODE and job.attempt == 1
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R2, 1)
    planned = node_replacement.plan(job, at(60))
    assert planned is not None and planned.nodes == (N0, R1, R2)
    job = node_replacement.regrouped(job, planned, at(60))
    assert (job.substatus, job.attempt, job.preemptions) == (S.TRAINING, 1, 2)
    assert job.attempts[0].checkpoint_step == 40


def test_two_nodes_noticed_at_once_the_second_heard_before_the_shrink_waits_for_both() -> None:
    job = lose(lose(training_gang(3, min_nodes=2), N1), N2, seconds=11)
    job = stop(job, N0, 40, generation=0)
    assert node_replacement.plan(job, at(12)) is None  # node 0 alone: no shrink
    job = node_replacement.booted(job, R1, 1)
    assert node_replacement.plan(job, at(13)) is None
    job = node_replacement.booted(job, job.nodes[2], 1)
    planned = node_replacement.plan(job, at(14))
    assert planned is not None and not planned.shrink and planned.nodes == tuple(job.nodes)
    job = node_replacement.regrouped(job, planned, at(14))
    assert (job.substatus, job.attempt, job.resizes) == (S.TRAINING, 1, 0)


def test_a_node_that_trained_in_the_smaller_gang_makes_it_wait_for_its_next_save() -> None:
    job = lose(shrunk(), N2, seconds=60, generation=2)  # it ran at the smaller size
    job = node_replacement.booted(node_replacement.booted(job, R1, 1), R2, 1)
    assert node_replacement.plan(job, at(70)) is None  # node 0's save at this stop
    planned = node_replacement.plan(stop(job, N0, 90, generation=2), at(71))
    assert planned is not None and planned.nodes == (N0, R1, R2)


def test_with_min_nodes_left_a_node_that_never_joined_the_smaller_gang_shrinks_it_at_once() -> None:
    job = lose(shrunk(4, min_nodes=2), N3, seconds=13, generation=0)
    planned = node_replacement.plan(job, at(14))  # no new save to wait for
    assert planned is not None and planned.shrink and planned.nodes == (N0, N2)
