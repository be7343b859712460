"""A gang's lost node's late epoch reports, through the real handlers: the
epoch it trained is kept on the job and in its history (a lost node 0 is the
one that reports them), without moving the job backwards; a VM that was
never a node of the attempt is still refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import EpochDone, JobFinished
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.emulators.test_gang_replacement import (
    N0,
    N1,
    R0,
    boot,
    job_of,
    preempt,
    training_gang,
)
from tests.emulators.test_gangs import node

pytestmark = pytest.mark.emulators


def epoch(call: Callable[..., Any], name: str, number: int, mid: str, **fields: Any) -> int:
    fields = {"epochs": 3, "step": 10 * number, "metrics": {"loss": 1.0 / number}, **fields}
    report = node(EpochDone, name, epoch=number, **fields)
    return int(call("on_epoch_done", "epoch_done", report, message_id=mid).status_code)


def recorded(project: str) -> dict[tuple[int, int], float | None]:
    """The job's epoch history: (attempt, epoch) -> loss."""
    return {
        (e.attempt, e.epoch): e.metrics["loss"] for e in FirestoreStore(project).list_epochs("job1")
    }


def test_a_lost_node_zeros_late_epoch_is_kept_while_replacing_and_after_the_regroup(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    assert epoch(call, N0, 1, "e1") == 200
    preempt(call, N0, step=25)  # node 0's agent: saved at step 25
    seen_before = FirestoreStore(project).get_instance(N0)
    assert epoch(call, N0, 2, "e2-late") == 200  # sent before its loss, heard after
    job = job_of(project)
    assert (job.substatus, job.epoch, job.step) == (JobSubstatus.REPLACING_NODE, 2, 20)
    assert recorded(project) == {(1, 1): 1.0, (1, 2): 0.5}
    # The lost VM does not look alive again: its instance is as its loss left it.
    assert FirestoreStore(project).get_instance(N0) == seen_before
    boot(call, R0)
    assert job_of(project).substatus == JobSubstatus.TRAINING  # regrouped around R0
    assert epoch(call, R0, 3, "e3", metrics={"loss": 0.25}) == 200
    # A later report of the lost node, now on the attempt's record as replaced,
    # of an epoch the gang recorded since: neither the job nor the history goes back.
    assert epoch(call, N0, 3, "e3-late", metrics={"loss": 9.0}) == 200
    assert epoch(call, N0, 2, "e2-again", step=5, metrics={"loss": 9.0}) == 200
    job = job_of(project)
    assert (job.epoch, job.step, job.metrics) == (3, 30, {"loss": 0.25})
    assert recorded(project) == {(1, 1): 1.0, (1, 2): 0.5, (1, 3): 0.25}


def test_a_late_epoch_never_reopens_a_finished_gang_nor_comes_from_a_stranger(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    preempt(call, N1, step=25)
    # A VM that was never a node of the attempt (though it carries the
    # attempt's token): still stale.
    assert epoch(call, "sl-job1-a1-n7", 2, "e-stranger") == 200
    assert job_of(project).epoch == 0 and recorded(project) == {}
    assert epoch(call, N1, 1, "e1-late") == 200  # a lost worker reports no epochs, but could
    assert job_of(project).epoch == 1
    done = node(JobFinished, N0, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f0")
    assert job_of(project).status == JobStatus.COMPLETED
    assert epoch(call, N1, 2, "e2-late") == 200
    job = job_of(project)
    assert (job.status, job.substatus, job.epoch) == (
        JobStatus.COMPLETED,
        JobSubstatus.COMPLETED,
        1,
    )
