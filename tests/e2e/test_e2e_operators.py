"""Each framework's environment end to end: a 2-node job on the whole local
stack (two local "VMs" of one gang, the real agents), running a real
collective through the variables spotline sets: torch.distributed's gloo
all_reduce, XGBoost's tracker and allreduce, a Ray cluster whose tasks run on
both nodes. The scripts are examples/operators, fetched from code_uri."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus
from spotline.vm_image.agent.transfers import upload_folder
from tests.e2e.test_e2e_recovery import submit, wait_no_vms
from tests.framework_required import require_framework

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "operators"
# Ray on a 2-core host shared by two "VMs": one CPU each, the smallest object store.
SMALL_RAY = {"SPOTLINE_RAY_NUM_CPUS": "1", "SPOTLINE_RAY_OBJECT_STORE_BYTES": str(80 * 2**20)}


def run_two_nodes(stack: LocalStack, script: str, timeout_s: float, **fields: Any) -> JobDoc:
    """Submit ``script`` (from examples/operators) as a 2-node command job;
    the job once ended and its VMs gone."""
    assert stack.storage is not None
    code_uri = f"{stack.storage.root}/code/operators"
    upload_folder(EXAMPLES, code_uri)
    job_id = submit(
        stack, trainer=None, command=["python", script], code_uri=code_uri, nodes=2, **fields
    )
    job = wait_for_job(FirestoreStore(stack.options.project), job_id, timeout_s, echo=False)
    wait_no_vms(stack, job_id, timeout_s=60)
    return job


def vm_log(stack: LocalStack, name: str) -> str:
    return Path(stack.workdir, "vms", f"{name}.log").read_text()


def test_pytorch_nodes_all_reduce_over_gloo(local_stack: LocalStack) -> None:
    job = run_two_nodes(local_stack, "torch_allreduce.py", 240, framework="pytorch")
    assert job.status == JobStatus.COMPLETED, job.error
    for rank, name in enumerate(job.nodes):
        log = vm_log(local_stack, name)
        assert f"torch rank {rank} of 2 all_reduce sum=3 " in log, log[-2000:]
        assert f"NODES='{' '.join(job.nodes)}'" in log


def test_xgboost_nodes_train_one_model_through_the_tracker(local_stack: LocalStack) -> None:
    require_framework("xgboost", "the 2-node XGBoost job", "xgboost")
    job = run_two_nodes(local_stack, "xgboost_train.py", 240, framework="xgboost")
    assert job.status == JobStatus.COMPLETED, job.error
    models = []
    for rank, name in enumerate(job.nodes):
        log = vm_log(local_stack, name)
        found = re.search(rf"xgboost rank {rank} of 2 sum=3 model=(\w+)", log)
        assert found, log[-2000:]
        models.append(found.group(1))
    assert models[0] == models[1]  # trained together: one model on both nodes


def test_a_ray_job_runs_tasks_on_both_nodes(local_stack: LocalStack) -> None:
    require_framework("ray", "the 2-node Ray job", "ray")
    job = run_two_nodes(local_stack, "ray_spread.py", 300, framework="ray", env=SMALL_RAY)
    assert job.status == JobStatus.COMPLETED, job.error
    head, worker = (vm_log(local_stack, name) for name in job.nodes)
    assert "node_count=2, expected_node_count=2" in head, head[-3000:]
    assert "2 nodes alive, 2 tasks ran on 2 nodes" in head, head[-3000:]
    assert "Ray runtime started" in worker, worker[-3000:]
    assert "received SIGTERM. Draining" in head  # the head stopped Ray at the end


def test_ray_nodes_missing_at_the_join_timeout_fail_the_job(local_stack: LocalStack) -> None:
    require_framework("ray", "the Ray join timeout job", "ray")
    # A worker's `ray start` takes seconds: none joins within 1 s of the head.
    job = run_two_nodes(
        local_stack, "ray_spread.py", 300, framework="ray", env=SMALL_RAY, ray_join_timeout_s=1
    )
    assert job.status == JobStatus.FAILED
    assert job.error is not None and "only 1 of 2 Ray nodes joined the head" in job.error
