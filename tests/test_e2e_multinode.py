"""A 2-node PyTorch job on the whole local stack: two local "VMs" from one
gang, the real agents giving each node its rank, DDP over gloo on loopback."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from infra.cli.demo import wait_for_job
from infra.localstack.stack import LocalStack
from shared.adapters.firestore_store import FirestoreStore
from shared.domain.states import JobStatus
from tests.test_e2e_recovery import epochs_of, submit, wait_no_vms

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]


def test_two_nodes_train_to_identical_weights(local_stack: LocalStack) -> None:
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
    deadline = time.monotonic() + 10
    while any(i.status != "CLOSED" for i in store.instances_of_job(job_id)):
        assert time.monotonic() < deadline
        time.sleep(0.2)
