"""A gang's node with no notice of its own stops with its gang: another node
was noticed, the ranks agreed on a step, rank 0 saved it, and node 0's agent
reports ``gang_stop`` (``spotline.shared.contract.events.SpotPreempted``). The reports
of the noticed node and of node 0 travel apart and come in either order, twice,
or for an attempt already past: the loss is recorded once, by the noticed
node's report, and the step node 0 saved is kept on the attempt either way.
Here the whole gang is relaunched (``replace_node_timeout_s`` 0); the same
orders with the lost node replaced are in ``tests/emulators/test_gang_replacement.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import Heartbeat, SpotPreempted
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.vm_image.agent.agent import gang_stopped
from tests.conftest import SPEC, vm_event
from tests.emulators.test_gangs import N0, N1, names, node

pytestmark = pytest.mark.emulators
GANG = {**SPEC, "nodes": 2, "replace_node_timeout_s": 0}
NEXT = ["sl-job1-a2-n0", "sl-job1-a2-n1"]


def job_of(project: str) -> JobDoc:
    job = FirestoreStore(project).get_job("job1")
    assert job is not None
    return job


def training_gang(call: Callable[..., Any]) -> None:
    call("submit_job", "submit", GANG, message_id="s1")
    for name in (N0, N1):
        beat = node(Heartbeat, name, phase="TRAINING", step=10)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")


def stop_of_node_0(step: int = 57, attempt: int = 1) -> SpotPreempted:
    return vm_event(
        SpotPreempted,
        instance=f"sl-job1-a{attempt}-n0",
        attempt=attempt,
        step=step,
        checkpoint_uri=f"gs://b/ckpt/step-{step}",
        gang_stop=True,
    )


def test_node_0s_stop_first_is_kept_and_the_noticed_nodes_report_recovers_once(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    for _ in range(2):  # redelivered
        call("on_spot_preempted", "spot_preempted", stop_of_node_0(), message_id="g0")
    job = job_of(project)
    # Not a loss by itself: node 0 was not preempted; the gang waits for the
    # noticed node's report, with the step node 0 saved on the attempt.
    assert (job.attempt, job.preemptions, job.substatus) == (1, 0, JobSubstatus.TRAINING)
    assert job.attempts[0].checkpoint_step == 57
    assert names(host) == [N0, N1]

    notice = node(SpotPreempted, N1)  # node 1's agent: its ranks saved nothing
    for _ in range(2):
        call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    job = job_of(project)
    assert (job.attempt, job.preemptions) == (2, 1)
    first = job.attempts[0]
    assert (first.outcome, first.checkpoint_step) == ("preempted", 57)
    assert names(host) == NEXT


def test_the_noticed_nodes_report_first_then_node_0s_step_lands_on_the_lost_attempt(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    call("on_spot_preempted", "spot_preempted", node(SpotPreempted, N1), message_id="p1")
    assert job_of(project).attempts[0].checkpoint_step is None
    for _ in range(2):
        call("on_spot_preempted", "spot_preempted", stop_of_node_0(), message_id="g0")
    job = job_of(project)
    assert (job.attempt, job.preemptions) == (2, 1)
    assert [(r.attempt, r.checkpoint_step) for r in job.attempts] == [(1, 57), (2, None)]
    assert names(host) == NEXT


def test_a_stop_alone_is_no_loss(call: Callable[..., Any], host: LocalCloud, project: str) -> None:
    """A trainer that exits 143 on a gang with no notice anywhere is not a
    preemption spotline counts: the job stays on its VMs (its agents no
    longer beat, so the reaper's stall timeout ends the attempt)."""
    training_gang(call)
    call("on_spot_preempted", "spot_preempted", stop_of_node_0(), message_id="g0")
    job = job_of(project)
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.TRAINING, 1, 0)
    assert names(host) == [N0, N1]


def test_an_older_attempts_stop_leaves_the_current_attempt_alone(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    call("on_spot_preempted", "spot_preempted", node(SpotPreempted, N1, step=None), message_id="p1")
    call("on_spot_preempted", "spot_preempted", stop_of_node_0(step=30), message_id="g0")
    call("on_spot_preempted", "spot_preempted", stop_of_node_0(step=99), message_id="g1")
    call("on_spot_preempted", "spot_preempted", stop_of_node_0(step=30), message_id="g0")
    job = job_of(project)
    # The newest save stands (the next attempt resumes from it, whatever came
    # last); attempt 2 gets none from attempt 1's node.
    assert [(r.attempt, r.checkpoint_step) for r in job.attempts] == [(1, 99), (2, None)]


@pytest.mark.parametrize("stop_first", [True, False])
def test_the_record_keeps_the_step_the_next_attempt_resumes_from(
    call: Callable[..., Any], host: LocalCloud, project: str, stop_first: bool
) -> None:
    """The noticed node's shutdown script reports the newest checkpoint it
    finds, the last epoch's (step 40); node 0 saved the gang's stop at step
    49, which the next attempt resumes from. The record kept whichever it was
    told first (40 with node 0's report last), or node 1's (40) over node 0's."""
    training_gang(call)
    noticed = node(SpotPreempted, N1, step=40, checkpoint_uri="gs://b/ckpt/step-40")
    reports = [(stop_of_node_0(step=49), "g0"), (noticed, "p1")]
    for event, message_id in reports if stop_first else reversed(reports):
        call("on_spot_preempted", "spot_preempted", event, message_id=message_id)
    job = job_of(project)
    assert (job.attempt, job.preemptions) == (2, 1)
    assert [(r.attempt, r.checkpoint_step) for r in job.attempts] == [(1, 49), (2, None)]
    assert job.checkpoint_uri == "gs://b/ckpt/step-49"


def test_a_stop_with_another_attempts_token_is_refused(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    forged = stop_of_node_0().model_copy(update={"token": "not-the-token"})
    call("on_spot_preempted", "spot_preempted", forged, message_id="g0")
    assert job_of(project).attempts[0].checkpoint_step is None


@pytest.mark.parametrize(
    ("exit_code", "notice_at", "nodes", "expected"),
    [
        (143, None, 2, True),  # stopped with its gang
        (143, 5.0, 2, False),  # its own notice: an ordinary preemption report
        (143, None, 1, False),  # one VM: 143 with no notice is its trainer's exit
        (1, None, 2, False),  # a crash is a failed run (a failing node fails it)
        (0, None, 2, False),
    ],
)
def test_which_exits_are_a_gang_stop(
    exit_code: int, notice_at: float | None, nodes: int, expected: bool
) -> None:
    assert gang_stopped(exit_code, notice_at, nodes) is expected
