"""A 3-node gang on the whole local stack loses node 1 mid-epoch, its zone
out of capacity, and then node 0 while it waits for node 1's replacement:
both are replaced on the same attempt, node 2 keeps its VM, and the gang
ends with the weights of the same job run with no preemption
(``spotline.shared.domain.further_losses``)."""

from __future__ import annotations

import re

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.e2e.test_e2e_elastic import RESUMED, log_of
from tests.e2e.test_e2e_multinode import final_digest
from tests.e2e.test_e2e_recovery import submit, wait_no_vms

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]
STOPPED = re.compile(r"stopped at step (\d+) .*state in ")


def test_a_gang_losing_node_0_while_it_waits_replaces_both_and_ends_with_a_straight_runs_weights(
    local_stack: LocalStack,
) -> None:
    cloud = local_stack.cloud
    assert cloud is not None
    store = FirestoreStore(local_stack.options.project)
    hyper = {"lr": 0.01, "hidden": 64, "step_time_s": 0.05}
    straight = submit(local_stack, nodes=3, epochs=3, hyperparameters=hyper)
    done = wait_for_job(store, straight, 300, echo=False)
    assert done.status == JobStatus.COMPLETED, done.error
    expected = final_digest(local_stack, done.nodes[0], 0)

    start = len(cloud.requests)
    job_id = submit(local_stack, nodes=3, epochs=3, hyperparameters=hyper)
    n0, n1, n2 = (f"sl-{job_id}-a1-n{rank}" for rank in range(3))
    r1, r0 = f"{n1}-g1", f"{n0}-g2"  # node 0's made at the gang's next generation
    events: list[str] = []
    node2_ids: set[str] = set()
    refused: list[str] = []  # the zone made to refuse capacity

    def chaos(node: int) -> None:
        args = ["--workdir", str(local_stack.workdir), "preempt", "--node", str(node)]
        assert cli([*args, "--notice-s", "10", job_id]) == 0

    def drive(job: JobDoc) -> None:
        """1. preempt node 1 mid-epoch, its zone out of capacity; 2. once
        the gang waits with node 0's save made, preempt node 0; 3. once that
        loss is recorded, give the zone its capacity back."""
        if (vm := cloud.get(n2)) is not None:
            node2_ids.add(str(vm["id"]))
        if not events and job.epoch >= 1 and job.zone:
            refused.append(job.zone)
            cloud.capacity_errors[job.zone] = "ZONE_RESOURCE_POOL_EXHAUSTED"
            chaos(1)
            events.append("node 1 lost")
        elif (
            events == ["node 1 lost"]
            and job.substatus == JobSubstatus.REPLACING_NODE
            and job.replacing is not None
            and job.replacing.saved
        ):
            chaos(0)
            events.append("node 0 lost")
        elif events[-1:] == ["node 0 lost"] and job.replacing is not None and job.replacing.more:
            cloud.capacity_errors.pop(refused[0])
            events.append("capacity back")

    try:
        job = wait_for_job(store, job_id, 600, echo=False, on_update=drive)
    finally:
        for zone in refused:  # the stack serves the tests after this one
            cloud.capacity_errors.pop(zone, None)

    story = "\n".join(f"{h.at:%H:%M:%S} {h.status}/{h.substatus} {h.note}" for h in job.history)
    assert job.status == JobStatus.COMPLETED, job.error
    assert events == ["node 1 lost", "node 0 lost", "capacity back"], story
    assert (job.attempt, job.preemptions, job.nodes) == (1, 2, [r0, r1, n2]), story
    (attempt,) = job.attempts
    saved = attempt.checkpoint_step
    assert saved is not None and saved % 45 != 0  # the notice's save, mid-epoch
    assert attempt.resumed_from_step == saved
    requests = cloud.requests[start:]
    inserts = [
        r.body["name"] for r in requests if r.method == "POST" and r.path.endswith("/instances")
    ]
    # Asked again while the zone had no capacity; each made once, and no
    # gang inserted whole again.
    assert set(inserts) == {r1, r0}
    assert sum(r.path.endswith("/bulkInsert") for r in requests) == 1
    deleted = [r.path.rsplit("/", 1)[-1] for r in requests if r.method == "DELETE"]
    # The lost VMs are deleted (a delete may be asked again), node 2 only at the end.
    assert deleted.index(n2) > max(deleted.index(n1), deleted.index(n0)), deleted
    # Node 2 is one VM throughout: one instance id, before the losses and
    # after, and its one agent trained before and after the regroup.
    instance = store.get_instance(n2)
    assert instance is not None and node2_ids == {instance.instance_id}
    node2 = log_of(local_stack, n2)
    assert "the gang regrouped (generation 2" in node2, node2[-3000:]
    # Node 0 saved once, at the first stop; every node resumed from there.
    stops = [int(step) for step in STOPPED.findall(log_of(local_stack, n0))]
    assert stops == [saved]
    for name in job.nodes:
        assert RESUMED.findall(log_of(local_stack, name))[-1:] == [str(saved)]
    digests = {final_digest(local_stack, name, rank) for rank, name in enumerate(job.nodes)}
    assert digests == {expected}
    wait_no_vms(local_stack, job_id)
