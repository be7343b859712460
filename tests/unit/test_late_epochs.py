"""A gang's lost node's late epoch reports (``spotline.shared.domain.late_epochs``):
kept while they move the job forward, from a VM that was a node of the
attempt; stale from any other. Pure: no emulator."""

from __future__ import annotations

from typing import Any

import pytest

from spotline.shared.contract.events import EpochDone
from spotline.shared.domain import late_epochs, lifecycle, node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import StaleEvent
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.unit.test_gang_resize_losses import N3, four_shrunk
from tests.unit.test_node_replacement import N0, N1, R0, at, lose, regroup, training_gang

S = JobSubstatus


def report(name: str, epoch: int, step: int | None = None, **fields: Any) -> EpochDone:
    return EpochDone(
        job_id="job1", attempt=fields.pop("attempt", 1), instance=name, sent_at=at(0),
        token="t", epoch=epoch, step=10 * epoch if step is None else step,
        **{"epochs": 4, "metrics": {"loss": 1.0 / epoch}, **fields},
    )  # fmt: skip


def replaced_node_zero() -> JobDoc:
    job = lifecycle.epoch_done(training_gang(), report(N0, 1), at(5))
    return lose(job, N0, step=25, saved=True)


def test_a_lost_node_zeros_late_epoch_moves_the_job_forward_and_nothing_else() -> None:
    job = replaced_node_zero()
    late = late_epochs.epoch_done(job, report(N0, 2), at(20))
    assert (late.epoch, late.step, late.metrics) == (2, 20, {"loss": 0.5})
    assert (late.substatus, late.nodes, late.replacing) == (
        S.REPLACING_NODE,
        job.nodes,
        job.replacing,
    )


def test_a_late_epoch_never_lowers_the_step_nor_reopens_a_finished_job() -> None:
    job = node_replacement.placed(replaced_node_zero(), R0, "42", at(12))
    job = node_replacement.booted(job, R0, 1)
    job = regroup(job, at(30))
    assert job.substatus == S.TRAINING and late_epochs.former_node(job, N0, 1)
    job = late_epochs.epoch_done(job, report(R0, 3), at(40))
    for older in (report(N0, 2), report(N0, 3, metrics={"loss": 9.0}), report(N0, 4, step=5)):
        assert late_epochs.epoch_done(job, older, at(50)) == job
    done = job.model_copy(update={"status": JobStatus.COMPLETED, "substatus": S.COMPLETED})
    assert late_epochs.epoch_done(done, report(N0, 4), at(60)) == done


def test_a_second_node_lost_while_an_elastic_gang_is_smaller_is_a_former_node_too() -> None:
    """The first replacement is pending beside the second (``NodeReplacement.more``)."""
    job = lose(four_shrunk(), N3, seconds=30)
    assert late_epochs.former_node(job, N1, 1) and late_epochs.former_node(job, N3, 1)
    late = late_epochs.epoch_done(job, report(N3, 4, step=45), at(31))
    assert (late.epoch, late.substatus, late.nodes) == (4, S.REPLACING_NODE, job.nodes)


@pytest.mark.parametrize(
    ("name", "attempt"),
    [("sl-job1-a1-n7", 1), (N1, 1), (N0, 2)],
    ids=["never-a-node", "a-survivor-is-no-former-node", "another-attempt"],
)
def test_a_report_from_no_former_node_of_the_attempt_is_judged_as_ever(
    name: str, attempt: int
) -> None:
    job = replaced_node_zero()
    assert not late_epochs.former_node(job, name, attempt)
    if name == N1:  # a current node: its epoch is taken as any
        assert late_epochs.epoch_done(job, report(name, 2), at(20)).epoch == 2
        return
    with pytest.raises(StaleEvent):
        late_epochs.epoch_done(job, report(name, 2, attempt=attempt), at(20))


def test_a_lost_nodes_report_beyond_the_spec_is_refused() -> None:
    beyond = report(N0, 5, epochs=9)
    with pytest.raises(lifecycle.InvalidMessage):
        late_epochs.epoch_done(replaced_node_zero(), beyond, at(20))
