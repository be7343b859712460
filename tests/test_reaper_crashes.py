"""Re-entrancy of recovery: a process killed before any one of its side
effects (a document written, a VM created or deleted) leaves state that the
redelivered event, or failing that the next sweeps, finish.

For each way a VM is lost, the lost attempt is recovered once per crash point
k = 0, 1, 2, ... (the process dies before its k-th side effect), until one
run gets through uncrashed; after each crash, two sweeps later on must have
converged: the job on its next attempt with a VM, the lost VM deleted, its
slot free, the queue empty. The in-memory store and the local cloud (VMs are
records) stand in for Firestore and Compute Engine.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Literal

import pytest

from functions.deps import Deps
from functions.ops.jobs import admit, start
from functions.ops.recovery import preempted
from functions.ops.sweep import sweep
from infra.localcloud.cloud import LocalCloud
from infra.localcloud.launchers import RecordLauncher
from shared.contract.events import PreemptionNotice
from shared.domain.documents import JobDoc
from shared.domain.errors import PermanentError
from shared.domain.lifecycle import advance, instance_executing, instance_seen
from shared.domain.liveness import NOTICE_MARGIN_S, PREEMPTION_NOTICE_S
from shared.domain.spec import JobSpec
from shared.domain.states import InstanceStatus, JobSubstatus
from shared.settings import Settings
from tests.crashes import Budget, Crash, CrashingCompute, CrashingStore
from tests.documents import T0, at
from tests.local_cloud import client

S = JobSubstatus
LOST, NEXT = "sl-job1-a1", "sl-job1-a2"
SPEC = {
    "user": "alice",
    "machine_ids": ["g2-standard-4"],
    "trainer": "digits_mlp",
    "job_id": "job1",
}
REQUEST_TIMEOUT_S = 120.0


@dataclass
class World:
    deps: Deps
    store: CrashingStore
    cloud: LocalCloud
    budget: Budget


@contextmanager
def training(name: str) -> Iterator[World]:
    """job1 TRAINING on its first VM, which last beat at T0."""
    with LocalCloud(f"crash-{name}", RecordLauncher()) as cloud:
        budget = Budget()
        store = CrashingStore(budget)
        settings = Settings(
            project=cloud.project,
            zones=("us-central1-a", "us-central1-b"),
            request_timeout_s=REQUEST_TIMEOUT_S,
        )
        compute = CrashingCompute(client(cloud), budget)
        deps = Deps(settings, store=store, compute=compute, clock=lambda: T0)
        start(deps, admit(deps, JobSpec.model_validate(SPEC), "m1", T0), T0)
        for phase in (S.GEARING_UP_ENV, S.SENDING_MODEL_AND_DATA, S.TRAINING):
            store.update_job("job1", partial(_advance, to=phase))
        store.update_instance(
            LOST, lambda i: instance_executing(instance_seen(i, T0, booted=True), T0)
        )
        yield World(deps, store, cloud, budget)


def _advance(job: JobDoc, to: JobSubstatus) -> JobDoc:
    return advance(job, to, T0)


def converged(world: World, outcome: str) -> list[str]:
    """What is not yet as it should be, in words (empty: converged)."""
    store, wrong = world.store, []
    job = store.get_job("job1")
    assert job is not None
    if (job.attempt, job.substatus) != (2, S.CONNECTING_SERVER) or job.instance != NEXT:
        wrong.append(f"job on attempt {job.attempt}, {job.substatus}, {job.instance}")
    if [r.outcome for r in job.attempts[:1]] != [outcome]:
        wrong.append(f"attempt 1 ended {[r.outcome for r in job.attempts[:1]]}")
    lost = store.get_instance(LOST)
    if lost is None or lost.status != InstanceStatus.CLOSED:
        wrong.append(f"{LOST} is {lost and (lost.status, lost.substatus)}")
    vms = sorted(vm["name"] for vm in world.cloud.list())
    if vms != [NEXT]:
        wrong.append(f"VMs: {vms}")
    user = store.get_user("alice")
    held = user and (user.active_jobs, user.active_instances)
    if held != (["job1"], [NEXT]):
        wrong.append(f"slots held: {held}")
    if store.get_queue("job1") is not None:
        wrong.append("a queue entry is left")
    return wrong


@dataclass(frozen=True)
class Loss:
    """One way to lose the VM: ``lose`` sets the scene, ``act`` recovers at
    ``at_s``; ``retry``: the report is redelivered after a crash; ``notice``:
    a report at the start of the 30 s notice, after which Compute Engine takes
    the VM."""

    outcome: str
    at_s: float
    lose: Callable[[World], None]
    act: Callable[[World, datetime], object]
    retry: bool = False
    notice: bool = False


def _sweep(world: World, now: datetime) -> object:
    return sweep(world.deps, now)


def _report(source: Literal["agent", "log-sink"]) -> Callable[[World, datetime], object]:
    def act(world: World, now: datetime) -> object:
        instance = world.store.get_instance(LOST)
        assert instance is not None
        notice = PreemptionNotice(instance=LOST, zone=instance.zone, source=source)
        if source == "agent":
            notice = notice.model_copy(update={"attempt": 1, "step": 7})
        with suppress(PermanentError):  # acknowledged: recorded already
            preempted(world.deps, instance, notice, now)
        return None

    return act


def _nothing(world: World) -> None:
    pass


LOSSES = {
    "stalled, found by the sweep": Loss("stalled", 301, _nothing, _sweep),
    "vanished, found by the sweep": Loss("preempted", 10, lambda w: w.cloud.kill(LOST), _sweep),
    "the agent's report, redelivered": Loss(
        "preempted", 10, _nothing, _report("agent"), retry=True, notice=True
    ),
    "the agent's report, never redelivered": Loss(
        "preempted", 10, _nothing, _report("agent"), notice=True
    ),
    "the log sink's report, redelivered": Loss(
        "preempted", 10, _nothing, _report("log-sink"), retry=True, notice=True
    ),
    "the log sink's report, never redelivered": Loss(
        "preempted", 10, _nothing, _report("log-sink"), notice=True
    ),
}


@pytest.mark.parametrize("how", LOSSES)
def test_a_recovery_killed_before_any_side_effect_is_finished_later(how: str) -> None:
    loss, stuck = LOSSES[how], []
    for k in itertools.count():
        with training(f"{k}") as world:
            loss.lose(world)
            world.budget.left, world.budget.done = k, []
            crash = "no crash"
            try:
                loss.act(world, at(loss.at_s))
            except Crash as killed:
                crash = str(killed)
            world.budget.left = None
            if loss.retry:
                loss.act(world, at(loss.at_s + 10))
            if loss.notice and world.cloud.get(LOST) is not None:
                world.cloud.kill(LOST)  # the notice is over: Compute Engine took it
            # Later sweeps: past the job's request timeout and the preemption notice.
            later = loss.at_s + REQUEST_TIMEOUT_S + 1
            sweep(world.deps, at(later))
            sweep(world.deps, at(later + 1))
            wrong = converged(world, loss.outcome)
            if wrong:
                stuck.append(f"{crash}: {'; '.join(wrong)}")
            if crash == "no crash":
                break
    assert k > 3, "the recovery made fewer side effects than it should"
    assert not stuck, "\n".join(stuck)


def test_a_vm_the_log_sink_reported_preempted_is_deleted_after_its_notice() -> None:
    with training("notice") as world:
        _report("log-sink")(world, at(10))
        sweep(world.deps, at(10 + PREEMPTION_NOTICE_S))
        assert sorted(vm["name"] for vm in world.cloud.list()) == [LOST, NEXT]
        sweep(world.deps, at(10 + PREEMPTION_NOTICE_S + NOTICE_MARGIN_S))
        assert sorted(vm["name"] for vm in world.cloud.list()) == [NEXT]


def test_the_agent_s_report_after_the_log_sink_s_ends_the_notice() -> None:
    with training("saved") as world:
        _report("log-sink")(world, at(10))
        assert sorted(vm["name"] for vm in world.cloud.list()) == [LOST, NEXT]
        _report("agent")(world, at(15))  # state saved: stale, yet the VM can go
        assert sorted(vm["name"] for vm in world.cloud.list()) == [NEXT]
        job = world.store.get_job("job1")
        assert job is not None and job.attempts[0].checkpoint_step == 7
