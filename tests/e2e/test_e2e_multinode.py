"""A 2-node PyTorch job on the whole local stack: two local "VMs" from one
gang, the real agents giving each node its rank, DDP over gloo on loopback."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from tests.e2e.test_e2e_recovery import epochs_of, preempt_once, submit, wait_no_vms

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]


def test_two_nodes_train_to_identical_weights(
    local_stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    store = FirestoreStore(local_stack.options.project)
    job_id = submit(local_stack, nodes=2, epochs=3, hyperparameters={"lr": 0.01, "hidden": 64})

    job = wait_for_job(store, job_id, 180, echo=False)

    assert job.status == JobStatus.COMPLETED, job.error
    assert len(job.nodes) == 2 and job.instance == job.nodes[0]
    assert epochs_of(store, job_id, 3) == [1, 2, 3]  # node 0 reports
    wait_no_vms(local_stack, job_id)
    digests = []
    for rank, name in enumerate(job.nodes):
        log = Path(local_stack.workdir, "vms", f"{name}.log").read_text()
        found = re.search(rf"rank {rank} final weights sha256=(\w+)", log)
        assert found, f"node {name} did not finish:\n{log[-2000:]}"
        digests.append(found.group(1))
    assert digests[0] == digests[1]
    # Every line node 1's agent wrote for the job names the job, the attempt
    # and the node: what the attempt's Cloud Logging query matches.
    records = [
        json.loads(line)
        for line in Path(local_stack.workdir, "vms", f"{job.nodes[1]}.log").read_text().splitlines()
        if line.startswith("{")
    ]
    mine = [r for r in records if r.get("job_id") == job_id]
    assert mine and all(r["attempt"] == 1 and r["node"] == 1 for r in mine)
    capsys.readouterr()
    assert (
        cli(["--workdir", str(local_stack.workdir), "logs", job_id, "--node", "1", "--json"]) == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert {(line["node"], line["instance"]) for line in shown} == {(1, job.nodes[1])}
    assert any(f"rank 1 final weights sha256={digests[1]}" in line["message"] for line in shown)
    assert cli(["--workdir", str(local_stack.workdir), "logs", job_id]) == 0
    both = capsys.readouterr().out
    assert "[node 0] rank 0 final weights" in both and "[node 1] rank 1 final weights" in both
    deadline = time.monotonic() + 10
    while any(i.status != "CLOSED" for i in store.instances_of_job(job_id)):
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_a_notice_on_node_1_is_saved_by_node_0_and_no_step_is_lost(
    local_stack: LocalStack,
) -> None:
    """Only node 1 of the gang is preempted, mid-epoch: the built-in trainer's
    ranks stop at one step, rank 0 (on node 0, which got no notice) saves it,
    and the next attempt resumes at that step, not at the last epoch's end
    (the whole gang relaunched: ``replace_node_timeout_s`` 0)."""
    store = FirestoreStore(local_stack.options.project)
    hyper = {"lr": 0.01, "hidden": 64, "step_time_s": 0.05}
    job_id = submit(local_stack, nodes=2, epochs=3, hyperparameters=hyper, replace_node_timeout_s=0)
    preempt = preempt_once(local_stack, node=1)

    job = wait_for_job(store, job_id, 300, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    first, second = job.attempts[:2]
    assert first.outcome == "preempted" and first.checkpoint_step is not None
    steps_per_epoch = 45  # 1438 training samples, batch 32
    assert first.checkpoint_step % steps_per_epoch != 0  # the notice's save, mid-epoch
    assert second.resumed_from_step == first.checkpoint_step
    node0 = Path(local_stack.workdir, "vms", f"{first.node_names[0]}.log").read_text()
    assert f"stopped at step {first.checkpoint_step} (another node's preemption notice)" in node0
    wait_no_vms(local_stack, job_id)


def final_digest(stack: LocalStack, name: str, rank: int) -> str:
    log = Path(stack.workdir, "vms", f"{name}.log").read_text()
    found = re.findall(rf"rank {rank} final weights sha256=(\w+)", log)
    assert found, f"node {name} did not finish:\n{log[-3000:]}"
    return str(found[-1])


@pytest.mark.parametrize(
    ("nodes", "lost"), [(2, 1), (2, 0), (3, 0)], ids=["2-lose-1", "2-lose-0", "3-lose-0"]
)
def test_a_lost_node_is_replaced_and_the_gang_ends_with_an_uninterrupted_runs_weights(
    local_stack: LocalStack, nodes: int, lost: int
) -> None:
    """One node of a gang is preempted mid-epoch: the others keep their VMs
    (the same names, never deleted), one VM replaces the lost node (node 0:
    the replacement becomes the gang's head), the gang restarts its ranks
    from the step rank 0 saved, and the weights it ends with are those of the
    same job run with no preemption."""
    assert local_stack.cloud is not None
    store = FirestoreStore(local_stack.options.project)
    hyper = {"lr": 0.01, "hidden": 64, "step_time_s": 0.05}
    straight = submit(local_stack, nodes=nodes, epochs=3, hyperparameters=hyper)
    done = wait_for_job(store, straight, 300, echo=False)
    assert done.status == JobStatus.COMPLETED, done.error
    expected = final_digest(local_stack, done.nodes[0], 0)

    start = len(local_stack.cloud.requests)
    job_id = submit(local_stack, nodes=nodes, epochs=3, hyperparameters=hyper)
    preempt = preempt_once(local_stack, node=lost)
    job = wait_for_job(store, job_id, 300, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    first = [f"sl-{job_id}-a1-n{rank}" for rank in range(nodes)]
    replacement = f"{first[lost]}-g1"
    regrouped = [replacement if rank == lost else name for rank, name in enumerate(first)]
    assert (job.attempt, job.preemptions, job.nodes) == (1, 1, regrouped)
    (attempt,) = job.attempts
    assert attempt.checkpoint_step is not None and attempt.checkpoint_step % 45 != 0  # mid-epoch
    assert attempt.resumed_from_step == attempt.checkpoint_step
    assert job.phase_seconds.get("waiting_for_node", 0) > 0
    requests = local_stack.cloud.requests[start:]
    inserts = [
        r.body["name"] for r in requests if r.method == "POST" and r.path.endswith("/instances")
    ]
    assert inserts == [replacement]  # exactly one insert besides the gang's bulk insert
    assert sum(r.path.endswith("/bulkInsert") for r in requests) == 1
    deleted = [r.path.rsplit("/", 1)[-1] for r in requests if r.method == "DELETE"]
    deleted = [name for name in deleted if name.startswith(f"sl-{job_id}-")]
    assert deleted[0] == first[lost]  # the survivors' deletes come only at the job's end
    # Each survivor is the same VM throughout: its one agent trained before and after.
    for rank, name in enumerate(first):
        if rank != lost:
            log = Path(local_stack.workdir, "vms", f"{name}.log").read_text()
            assert "the gang regrouped (generation 1" in log
    digests = {final_digest(local_stack, name, rank) for rank, name in enumerate(regrouped)}
    # Three ranks too: the trainer sums each step's gradients in one order in
    # every run (``digits_mlp._distributed``).
    assert digests == {expected}
    wait_no_vms(local_stack, job_id)
