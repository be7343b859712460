"""Dependencies failing: Compute Engine answering 503s, or answering
too late (the work done, the caller timed out), for a while.

The real handlers and reaper run as in the replay (``tests.replay``: the
in-memory store, GceCompute on the local cloud, a stepped clock), while the
local cloud suffers an ``Outage`` (``spotline.infra.localcloud.outage``) for a window of
steps. A delivery that raises is redelivered, as Pub/Sub does, until it has
failed ``MAX_DELIVERIES`` times and is dead-lettered: what it left undone is
then the reaper's. After the window every job must end as planned, each
attempt on exactly one VM, with no VM, slot or queue entry left
(``tests.replay_checks.problems``).

``SPOTLINE_DEPS_JOBS`` (default 6), ``SPOTLINE_DEPS_SEEDS`` (default 1),
``SPOTLINE_DEPS_SHARE`` (default 0.5) and ``SPOTLINE_DEPS_STEPS`` (default 12)
size the runs; ``make soak-deps`` runs big ones.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import pytest

from spotline.infra.localcloud.chaos_client import ChaosClient
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.outage import Outage
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.domain.errors import TransientError
from spotline.shared.domain.placement import vm_name
from spotline.shared.domain.states import JobStatus
from spotline.shared.domain.vms import VmState
from tests.replay import PROJECT, TICK_EVERY, Delivery, Plan, Published, World, draw_plans
from tests.replay_checks import problems
from tests.unit.test_gce_compute import ZONE, vm_request

JOBS = int(os.environ.get("SPOTLINE_DEPS_JOBS", "6"))
SEEDS = [int(s) for s in os.environ.get("SPOTLINE_DEPS_SEEDS", "1").split(",")]
# The share of Compute's answers that fail, and for how many steps (of 10 s).
SHARE = float(os.environ.get("SPOTLINE_DEPS_SHARE", "0.5"))
STEPS = range(1, 1 + int(os.environ.get("SPOTLINE_DEPS_STEPS", "12")))
# Pub/Sub's max_delivery_attempts (spotline.infra.topology): then the dead-letter topic.
MAX_DELIVERIES = 10
# The handlers' HTTP timeout here, and how late a slow answer comes.
REQUEST_TIMEOUT_S = 0.5
LATE_S = 1.0


class DeadLettering(Delivery):
    """Each message once, in order; a failed one again in the next step, until
    it has failed ``MAX_DELIVERIES`` times (then it is dead-lettered)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: Counter[str] = Counter()
        self.dead: list[Published] = []

    def failed(self, message: Published, step: int) -> None:
        self.failures[message.message_id] += 1
        if self.failures[message.message_id] >= MAX_DELIVERIES:
            self.dead.append(message)
        else:
            super().failed(message, step)


def world_with_timeouts() -> World:
    """A World whose GceCompute gives up on an answer after REQUEST_TIMEOUT_S."""
    world: World = World(
        DeadLettering(),
        wrap_compute=lambda _: GceCompute(
            PROJECT,
            api_endpoint=world.cloud.endpoint,  # started by then
            operation_timeout_s=5.0,
            request_timeout_s=REQUEST_TIMEOUT_S,
            read_retry_s=1.0,
        ),
    )
    return world


def run_with_outage(world: World, plans: list[Plan], outage: Outage, steps: range) -> int:
    """The plans to their end, Compute suffering ``outage`` during ``steps``;
    the reaper ticks it took after the outage until nothing was left to do."""
    for plan in plans:
        world.plans[plan.job_id] = plan
    while world.step < steps.stop:
        if world.step == steps.start:
            world.cloud.start_outage(outage)
        world.run_step()
    world.cloud.end_outage()
    ended = world.step
    world.run([])
    world.settle()
    return (world.step - ended) // TICK_EVERY


def converged(world: World) -> list[str]:
    """``problems``, with VMs counted as made, not as insert requests sent: a
    refused insert made none, and its retry is another request."""
    found = [p for p in problems(world) if " inserts for attempt " not in p]
    boots = Counter(world.launcher.boots)
    for plan in world.plans.values():
        job = world.memory.get_job(plan.job_id)
        for attempt in range(1, (job.attempt if job else 0) + 1):
            made = boots[vm_name(plan.job_id, attempt)]
            if made != 1:
                found.append(f"{plan.job_id}: {made} VMs for attempt {attempt}")
    return found


def report(kind: str, seed: int, world: World, outage: Outage, ticks: int, took: float) -> str:
    delivery = world.delivery
    assert isinstance(delivery, DeadLettering)
    return (
        f"\n{kind} seed={seed}: {len(world.plans)} jobs, {outage.errors} errors and "
        f"{outage.delayed} late answers injected, {len(world.failures)} deliveries failed "
        f"(redelivered), {len(delivery.dead)} dead-lettered, {world.delivered} deliveries; "
        f"done {ticks} reaper ticks after the outage (then 3 sweeps), {took:.1f} s"
    )


# -- the adapter --


def test_a_503_on_insert_is_transient_and_creates_nothing(cloud: LocalCloud) -> None:
    cloud.start_outage(Outage(methods=frozenset({"POST"})))
    compute = GceCompute(cloud.project, api_endpoint=cloud.endpoint, read_retry_s=0.5)

    with pytest.raises(TransientError):
        compute.insert(vm_request())

    assert cloud.list() == []


def test_an_insert_answered_too_late_is_adopted_by_its_retry(cloud: LocalCloud) -> None:
    """The insert happened but the caller timed out: the retry (same requestId)
    returns that VM, and no second one is made."""
    outage = cloud.start_outage(Outage(delay_s=LATE_S, methods=frozenset({"POST"})))
    compute = GceCompute(
        cloud.project,
        api_endpoint=cloud.endpoint,
        request_timeout_s=REQUEST_TIMEOUT_S,
        read_retry_s=0.5,
    )
    with pytest.raises(TransientError):
        compute.insert(vm_request())
    assert [vm["name"] for vm in cloud.list()] == ["spotline-j-42-a1"]

    cloud.end_outage()
    vm = compute.insert(vm_request())

    assert (vm.name, vm.zone, outage.delayed) == ("spotline-j-42-a1", ZONE, 1)
    assert len(cloud.list()) == 1


def test_an_insert_whose_operation_poll_meets_a_503_still_returns_the_vm(
    cloud: LocalCloud,
) -> None:
    """The VM is made; a 503 on reading the operation is no failure to make it."""
    cloud.fail_next("POST", "/operations/[^/]+/wait$", 503, times=2)
    compute = GceCompute(cloud.project, api_endpoint=cloud.endpoint, read_retry_s=2.0)

    vm = compute.insert(vm_request())

    assert vm.name == "spotline-j-42-a1"
    assert len(cloud.requests_to("POST", "/wait")) == 3


def test_an_insert_made_but_not_read_back_still_returns_the_vm(cloud: LocalCloud) -> None:
    """Reading the new VM back keeps failing: it was made all the same, and a
    caller told otherwise leaves it running unrecorded."""
    cloud.fail_next("GET", "/instances/spotline-j-42-a1$", 503, times=1000)
    compute = GceCompute(cloud.project, api_endpoint=cloud.endpoint, read_retry_s=0.5)

    vm = compute.insert(vm_request())

    assert (vm.name, vm.zone, vm.state) == ("spotline-j-42-a1", ZONE, VmState.PROVISIONING)
    assert vm.labels == vm_request().labels


def test_the_outage_chaos_route(cloud: LocalCloud) -> None:
    chaos = ChaosClient(cloud.endpoint, cloud.project)
    chaos.start_outage(share=1.0, status=503)
    compute = GceCompute(cloud.project, api_endpoint=cloud.endpoint, read_retry_s=0.3)
    with pytest.raises(TransientError):
        compute.list({})

    ended = chaos.end_outage()

    assert ended["errors"] >= 1
    assert compute.list({}) == []


def test_an_outage_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="share 2"):
        Outage(share=2)
    with pytest.raises(ValueError, match="status 200"):
        Outage(status=200)


# -- the system --


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_jobs_converge_after_compute_answers_503s_for_a_while(
    seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    outage = Outage(share=SHARE, seed=seed)
    with world_with_timeouts() as world:
        ticks = run_with_outage(world, draw_plans(random.Random(seed), JOBS), outage, STEPS)
    with capsys.disabled():
        print(report("compute 503s", seed, world, outage, ticks, time.monotonic() - started))
    assert outage.errors > 0 and world.failures
    assert converged(world) == [], f"seed={seed}: {converged(world)}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_jobs_converge_after_compute_answers_too_late_for_a_while(
    seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Inserts, deletes and stops done, their answers after the caller's timeout."""
    started = time.monotonic()
    mutations = frozenset({"POST", "DELETE"})
    outage = Outage(share=SHARE, delay_s=LATE_S, methods=mutations, seed=seed)
    with world_with_timeouts() as world:
        ticks = run_with_outage(world, draw_plans(random.Random(seed), JOBS), outage, STEPS)
    with capsys.disabled():
        took = time.monotonic() - started
        print(report("compute late answers", seed, world, outage, ticks, took))
    assert outage.delayed > 0 and world.failures
    assert converged(world) == [], f"seed={seed}: {converged(world)}"


@pytest.mark.slow
def test_a_vm_that_reports_before_its_placement_is_recorded_is_heard() -> None:
    """The insert is made but answered too late, and Compute keeps failing the
    submission's redeliveries while the VM boots, trains and finishes: its
    events (JobFinished among them) must wait for the job to record the VM,
    not be dropped as stale, or the job is run a second time."""
    with world_with_timeouts() as world:
        world.plans["early"] = Plan("early", "alice", epochs=1, submit_step=1)
        late = Outage(delay_s=LATE_S, methods=frozenset({"POST"}), path_pattern="/instances$")
        world.cloud.start_outage(late)
        world.run_step()  # the insert is made; the submission fails
        assert [vm["name"] for vm in world.cloud.list()] == ["sl-early-a1"]
        lists = frozenset({"GET"})
        world.cloud.start_outage(Outage(methods=lists, path_pattern="/aggregated/instances$"))
        for _ in range(6):  # booted, training, epoch 1, finished: all published
            world.run_step()
        assert world.agents["sl-early-a1"].done
        world.cloud.end_outage()
        world.run([])
        world.settle()
    job = world.memory.get_job("early")
    assert job is not None
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.COMPLETED, 1, 0)
    assert converged(world) == []
