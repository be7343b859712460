"""An elastic 3-node PyTorch gang (``min_nodes`` 2) on the whole local stack:
it loses one node mid-epoch, trains on at 2 nodes while the replacement
cannot be placed, and grows back to 3 once it joins, each restart resuming
at the step rank 0 saved (``spotline.shared.domain.gang_resize``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.e2e.test_e2e_multinode import final_digest
from tests.e2e.test_e2e_recovery import submit, wait_no_vms

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]
STOPPED = re.compile(r"stopped at step (\d+) \(SIGTERM\), state in ")
RESUMED = re.compile(r"resumed_from_step=(\d+) ")


def log_of(stack: LocalStack, name: str) -> str:
    return Path(stack.workdir, "vms", f"{name}.log").read_text()


def test_an_elastic_gang_trains_on_at_two_nodes_and_grows_back_to_three(
    local_stack: LocalStack,
) -> None:
    cloud = local_stack.cloud
    assert cloud is not None
    store = FirestoreStore(local_stack.options.project)
    # 6 epochs of 45 steps, half a second each. Node 1 is lost early in
    # epoch 2 and its zone has no capacity until the smaller gang has ended
    # epoch 2; the reaper asks again 30 s after each refusal, so the
    # replacement may join some 80 steps later: the run must still be going.
    hyper = {"lr": 0.01, "hidden": 64, "step_time_s": 0.5}
    job_id = submit(local_stack, nodes=3, min_nodes=2, epochs=6, hyperparameters=hyper)
    start = len(cloud.requests)
    events: list[str] = []

    def drive(job: JobDoc) -> None:
        """1. preempt node 1 after epoch 1, its zone out of capacity; 2. once
        the other two have trained on to the end of epoch 2, let the
        replacement be placed."""
        if not events and job.epoch >= 1 and job.zone:
            cloud.capacity_errors[job.zone] = "ZONE_RESOURCE_POOL_EXHAUSTED"
            chaos = ["--workdir", str(local_stack.workdir), "preempt", "--node", "1"]
            assert cli([*chaos, "--notice-s", "10", job_id]) == 0
            events.append("preempted")
        elif events == ["preempted"] and job.resizes == 1 and job.epoch >= 2:
            assert job.substatus == JobSubstatus.TRAINING and job.replacing is not None
            cloud.capacity_errors.pop(job.zone or "", None)
            events.append("trained at 2")

    job = wait_for_job(store, job_id, 900, echo=False, on_update=drive)
    assert job.status == JobStatus.COMPLETED, job.error
    assert events == ["preempted", "trained at 2"]
    n0, n1, n2 = (f"sl-{job_id}-a1-n{rank}" for rank in range(3))
    r1 = f"{n1}-g1"
    assert (job.attempt, job.preemptions, job.resizes, job.nodes) == (1, 1, 2, [n0, r1, n2])
    notes = [h.note for h in job.history]
    assert any("trains on at 2 of 3 nodes" in note for note in notes)
    assert any("grows back to 3 nodes" in note for note in notes)
    inserts = [
        r.body["name"]
        for r in cloud.requests[start:]
        if r.method == "POST" and r.path.endswith("/instances")
    ]
    assert set(inserts) == {r1}  # asked again while the zone had no capacity; made once
    # Node 0 (rank 0 throughout) stopped twice: for node 1's notice, and to
    # grow back. Each restart resumed at the step it had just saved.
    node0 = log_of(local_stack, n0)
    assert "the gang regrouped (generation 2" in node0  # at 2 nodes
    assert "the gang regrouped (generation 3" in node0  # at 3
    saved = [int(step) for step in re.findall(r"stopped at step (\d+) .*state in ", node0)]
    resumed = [int(step) for step in RESUMED.findall(node0)]
    print(f"node 0 saved at steps {saved}, resumed at {resumed}")
    assert len(saved) == 2 and resumed == saved, node0[-3000:]
    assert saved[0] % 45 != 0  # the notice's save, mid-epoch
    assert saved[0] + 40 <= saved[1]  # the smaller gang trained to the end of epoch 2
    # Node 2 trained as rank 1 of 2, then as rank 2 of 3; the replacement
    # joined at the second save.
    assert RESUMED.findall(log_of(local_stack, n2)) == [str(step) for step in saved]
    assert RESUMED.findall(log_of(local_stack, r1)) == [str(saved[1])]
    digests = {final_digest(local_stack, name, rank) for rank, name in enumerate(job.nodes)}
    assert len(digests) == 1  # every rank ends with the same weights
    wait_no_vms(local_stack, job_id)
