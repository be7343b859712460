"""Re-entrancy of recovery and of the reaper: a process killed before any one
of its side effects (a document written, a VM created or deleted) leaves
state that the redelivered event, or failing that the next sweeps, finish.

For each way a VM is lost, the lost attempt is recovered once per crash point
k = 0, 1, 2, ... (the process dies before its k-th side effect), until one
run gets through uncrashed; after each crash, two sweeps later on must have
converged: the job on its next attempt with a VM, the lost VM deleted, its
slot free, the queue empty. The same for a sweep that ends a VM (a job
canceled past its max runtime, a cooling period over): killed anywhere, the
next sweeps leave what an uncrashed one leaves. The in-memory store and the
local cloud (VMs are records) stand in for Firestore and Compute Engine.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Literal

import pytest

from spotline.functions.deps import Deps
from spotline.functions.ops.jobs import admit, settle, start
from spotline.functions.ops.recovery import preempted
from spotline.functions.ops.sweep import sweep
from spotline.functions.ops.teardown import after_job
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.shared.contract.events import PreemptionNotice
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.lifecycle import advance, instance_executing, instance_seen
from spotline.shared.domain.liveness import NOTICE_MARGIN_S, PREEMPTION_NOTICE_S
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import InstanceStatus, JobSubstatus
from spotline.shared.settings import Settings
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
def training(name: str, **spec: object) -> Iterator[World]:
    """job1 TRAINING on its first VM, which last beat at T0."""
    # A project id is lowercase letters, digits and hyphens (Compute Engine's pattern).
    project = re.sub(r"[^a-z0-9-]", "-", f"crash-{name}".lower())
    with LocalCloud(project, RecordLauncher(), clock=lambda: T0) as cloud:
        budget = Budget()
        store = CrashingStore(budget)
        settings = Settings(
            project=cloud.project,
            zones=("us-central1-a", "us-central1-b"),
            request_timeout_s=REQUEST_TIMEOUT_S,
        )
        compute = CrashingCompute(client(cloud), budget)
        deps = Deps(settings, store=store, compute=compute, clock=lambda: T0)
        start(deps, admit(deps, JobSpec.model_validate({**SPEC, **spec}), "m1", T0), T0)
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


@pytest.mark.slow
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


# -- the reaper's other steps that touch a VM --


def _completed_and_cooling(world: World) -> None:
    """job1 completed at T0 and left its VM cooling for 600 s, as on_job_finished does."""
    for phase in (S.RETURNING, S.COMPLETED):
        world.store.update_job("job1", partial(_advance, to=phase))
    job = world.store.get_job("job1")
    assert job is not None
    settle(world.deps, job, T0)
    after_job(world.deps, job, LOST, T0)


def ended(world: World) -> tuple[object, ...]:
    """What a sweep that ended job1's VM leaves: compared with an uncrashed sweep's."""
    store = world.store
    job, lost, user = store.get_job("job1"), store.get_instance(LOST), store.get_user("alice")
    assert job is not None and lost is not None and user is not None
    vms = sorted(vm["name"] for vm in world.cloud.list())
    slots = (user.active_jobs, user.active_instances, user.stopped_instances)
    queued = store.get_queue("job1") is not None
    return job.status, job.cooling_cost_usd, lost.status, vms, slots, queued


ENDINGS = {
    "canceled past its max runtime": ({"max_runtime_s": 60}, _nothing, 61),
    "its cooling period over": ({"cool_down_period_s": 600}, _completed_and_cooling, 601),
}


def end_run(how: str, k: int | None, first_s: float) -> tuple[str, tuple[object, ...]]:
    """Sweep at ``first_s``, killed before its k-th side effect (None: never),
    then twice past the grace left to a job's own end; the crash and the state."""
    spec, prepare, at_s = ENDINGS[how]
    later = at_s + REQUEST_TIMEOUT_S + 1
    with training(f"end-{k}-{first_s}", **spec) as world:
        prepare(world)
        world.budget.left, world.budget.done = k, []
        crash = "no crash"
        try:
            sweep(world.deps, at(first_s))
        except Crash as killed:
            crash = str(killed)
        world.budget.left = None
        sweep(world.deps, at(later))
        sweep(world.deps, at(later + 1))
        return crash, ended(world)


@pytest.mark.slow
@pytest.mark.parametrize("how", ENDINGS)
def test_a_sweep_killed_while_it_ends_a_vm_is_finished_by_the_next(how: str) -> None:
    at_s = ENDINGS[how][2]
    whole = end_run(how, None, at_s)[1]
    status, cost, lost, vms, slots, queued = whole
    assert (lost, vms, slots, queued) == (InstanceStatus.CLOSED, [], ([], [], []), False)
    assert status in ("CANCELED", "COMPLETED")
    # A VM left cooling by the crash is charged till the sweep that ends it, no more.
    late_cost = end_run(how, None, at_s + REQUEST_TIMEOUT_S + 1)[1][1]
    assert isinstance(cost, float) and isinstance(late_cost, float)
    if status == "COMPLETED":
        assert 0 < cost < late_cost
    else:
        assert cost == late_cost == 0
    wrong = []
    for k in itertools.count():
        crash, state = end_run(how, k, at_s)
        if crash == "no crash":
            break
        if state[:1] + state[2:] != whole[:1] + whole[2:] or state[1] not in (cost, late_cost):
            wrong.append(f"{crash}: {state}")
    assert k > 2 and wrong == []
