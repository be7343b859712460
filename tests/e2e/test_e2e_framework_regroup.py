"""A gang of another framework than PyTorch loses one node and replaces only
it, on the whole local stack: the survivor keeps its VM, one VM is inserted
for the lost node, every node restarts the way its framework needs (XGBoost's
tracker on the new node 0, a Ray cluster formed anew) from the saved step,
and the run ends as one never stopped. The scripts are examples/operators,
each the framework's own way of saving and resuming."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import JobDoc
from spotline.vm_image.agent.transfers import upload_folder
from tests.e2e.test_e2e_operators import SMALL_RAY, vm_log
from tests.e2e.test_e2e_recovery import preempt_once, submit, wait_no_vms
from tests.framework_required import require_framework

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "operators"
ROOT = EXAMPLES.parents[1]


def replaced_once(
    stack: LocalStack, script: str, lost: int, timeout_s: float, **fields: Any
) -> JobDoc:
    """Run ``script`` as a 2-node job whose node ``lost`` is preempted once
    mid-training; the job once ended, after checking that exactly one VM was
    inserted (the replacement), the survivor was the same VM throughout, and
    the job stayed on its first attempt."""
    assert stack.cloud is not None and stack.storage is not None
    code_uri = f"{stack.storage.root}/code/regroup-{script}"
    upload_folder(EXAMPLES, code_uri)
    start = len(stack.cloud.requests)
    job_id = submit(
        stack, trainer=None, command=["python", script], code_uri=code_uri, nodes=2, **fields
    )
    preempt = preempt_once(stack, node=lost)
    job = wait_for_job(
        FirestoreStore(stack.options.project), job_id, timeout_s, echo=False, on_update=preempt
    )

    first = [f"sl-{job_id}-a1-n{rank}" for rank in range(2)]
    replacement = f"{first[lost]}-g1"
    regrouped = [replacement if rank == lost else name for rank, name in enumerate(first)]
    assert (job.attempt, job.preemptions, job.nodes) == (1, 1, regrouped), job.error
    requests = stack.cloud.requests[start:]
    inserts = [
        r.body["name"] for r in requests if r.method == "POST" and r.path.endswith("/instances")
    ]
    assert inserts == [replacement]  # exactly one insert besides the gang's bulk insert
    assert sum(r.path.endswith("/bulkInsert") for r in requests) == 1
    survivor = first[1 - lost]
    assert "the gang regrouped (generation 1" in vm_log(stack, survivor)
    assert job.phase_seconds.get("waiting_for_node", 0) > 0
    wait_no_vms(stack, job_id, timeout_s=60)
    return job


def xgboost_straight_digest(tmp_path: Path) -> str:
    """The model examples/operators/xgboost_resume.py trains on two ranks
    never stopped: two processes on loopback, outside spotline."""
    with socket.socket() as sock:  # a free port for the tracker
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    base = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "SPOTLINE_EPOCHS": str(XGBOOST_EPOCHS),
        "SPOTLINE_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "SPOTLINE_EVENTS": str(tmp_path / "events.jsonl"),
    }
    ranks = [
        subprocess.Popen(
            [sys.executable, str(EXAMPLES / "xgboost_resume.py")],
            env={**base, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [rank.communicate(timeout=120)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    found = re.search(r"xgboost rank 0 trained \d+ rounds model=(\w+)", outputs[0])
    assert found, outputs[0]
    return found.group(1)


XGBOOST_EPOCHS = 5  # of 10 rounds each (examples/operators/xgboost_resume.py)


@pytest.mark.parametrize("lost", [1, 0], ids=["lose-1", "lose-0-the-tracker"])
def test_an_xgboost_gang_replaces_its_lost_node_and_ends_with_a_straight_runs_model(
    local_stack: LocalStack, tmp_path: Path, lost: int
) -> None:
    """Node 1 (or node 0, which runs XGBoost's tracker) is preempted mid-run:
    every node stops after one round, node 0 saves the booster, the
    replacement joins, node 0 (the replacement, where node 0 was lost) runs
    the tracker on the regrouped port, and every node goes on from the saved
    round with ``xgb_model=``: the final booster is a straight run's."""
    require_framework("xgboost", "the XGBoost gang's replacement", "xgboost")
    expected = xgboost_straight_digest(tmp_path)

    job = replaced_once(
        local_stack, "xgboost_resume.py", lost, 300, framework="xgboost",
        epochs=XGBOOST_EPOCHS, hyperparameters={"step_time_s": 0.3},
    )  # fmt: skip

    assert job.status.value == "COMPLETED", job.error
    (attempt,) = job.attempts
    assert attempt.checkpoint_step is not None and 0 < attempt.checkpoint_step < 50
    assert attempt.resumed_from_step == attempt.checkpoint_step
    models = set()
    for rank, name in enumerate(job.nodes):
        found = re.findall(
            rf"xgboost rank {rank} trained 50 rounds model=(\w+)", vm_log(local_stack, name)
        )
        assert found, vm_log(local_stack, name)[-3000:]
        models.add(found[-1])
    assert models == {expected}


RAY_EPOCHS = 4  # of 10 steps each (examples/operators/ray_resume.py)


@pytest.mark.parametrize("lost", [1, 0], ids=["lose-a-worker", "lose-the-head"])
def test_a_ray_gang_replaces_its_lost_node_and_the_cluster_forms_again(
    local_stack: LocalStack, lost: int
) -> None:
    """A worker (or the head, where the driver runs) is preempted mid-run:
    the head's driver saves the step it is at (told by the launcher), the
    other node stops with it (exit 143, not a finish), one VM replaces the
    lost node, Ray starts again on the regrouped port with both nodes (the
    replacement the head, where the head was lost), and the driver resumes
    from its save: the total it ends with is a straight run's."""
    require_framework("ray", "the Ray gang's replacement", "ray")
    job = replaced_once(
        local_stack, "ray_resume.py", lost, 420, framework="ray", env=SMALL_RAY,
        epochs=RAY_EPOCHS, hyperparameters={"step_time_s": 0.5},
    )  # fmt: skip

    assert job.status.value == "COMPLETED", job.error
    (attempt,) = job.attempts
    steps = RAY_EPOCHS * 10
    assert attempt.checkpoint_step is not None and 0 < attempt.checkpoint_step < steps
    assert attempt.resumed_from_step == attempt.checkpoint_step
    head, worker = (vm_log(local_stack, name) for name in job.nodes)
    straight = 3 * steps * (steps + 1) / 2  # each step s adds (s + 1) * (1 + 2)
    assert f"ray driver: {steps} steps, total={straight:g}, tasks ran on 2 nodes" in head
    # The regrouped cluster formed with both nodes, on the new generation's port.
    assert head.count("node_count=2, expected_node_count=2") == (2 if lost == 1 else 1)
    survivor = worker if lost == 0 else head
    assert "stops with it" in survivor or "the workers are told 'stopping'" in survivor
