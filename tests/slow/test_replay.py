"""Issue 10's replayer: many jobs' lifecycles on one shared Deps, every message
delivered 1 to 5 times in shuffled order (``tests.replay``), against the same
plans run clean (each message once, in order). The end must be the clean
run's, job by job, with nothing left behind.

``SPOTLINE_REPLAY_JOBS`` (default 30) and ``SPOTLINE_REPLAY_SEED`` (default:
seed 1) size the run; ``make soak-replay`` runs a big one.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from typing import Any, TypeVar

import pytest

from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.replay import (
    MAX_DELAY,
    PROJECT,
    SECOND_LOSSES,
    Delivery,
    Plan,
    Published,
    Shuffled,
    World,
    draw_plans,
    log_entry,
)
from tests.replay_checks import outcome, problems

JOBS = int(os.environ.get("SPOTLINE_REPLAY_JOBS", "30"))
GANG_JOBS = max(JOBS // 2, 1)
SEEDS = [int(s) for s in os.environ.get("SPOTLINE_REPLAY_SEED", "1").split(",")]


def run(plans: list[Plan], delivery: Delivery) -> World:
    return play(plans, World(delivery))


AWorld = TypeVar("AWorld", bound=World)


def play(plans: list[Plan], world: AWorld) -> AWorld:
    with world:
        world.run(plans)
        world.settle()
    return world


class SetupWatch(World):
    """The world, noting after each delivery the replacements made for a
    node lost as its gang set up (``NodeReplacement.setting_up``), and those
    that turned out to be for a training gang (``node_replacement.trained``)."""

    def __init__(self, delivery: Delivery) -> None:
        super().__init__(delivery)
        self.setting_up: set[str] = set()
        self.trained: set[str] = set()

    def deliver(self, message: Published) -> bool:
        ok = super().deliver(message)
        for job in self.memory.list_jobs(JobStatus.active()):
            replacing = job.replacing
            if replacing is None:
                continue
            if replacing.setting_up is not None:
                self.setting_up.add(replacing.replacement)
            elif replacing.replacement in self.setting_up:
                self.trained.add(replacing.replacement)
        return ok


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_shuffled_redelivered_events_end_as_the_clean_run(
    seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    plans = draw_plans(random.Random(seed), JOBS)
    clean = run([p.fresh() for p in plans], Delivery())
    assert clean.failures == [], f"seed={seed}: the clean run failed: {clean.failures}"
    assert problems(clean) == [], f"seed={seed}: the clean run: {problems(clean)}"

    replayed = run([p.fresh() for p in plans], Shuffled(random.Random(seed)))
    took = time.monotonic() - started
    with capsys.disabled():  # the numbers, not the functions' log lines
        print(
            f"\nreplay seed={seed}: {JOBS} jobs, {len(replayed.bus.published)} events published, "
            f"{replayed.delivered} deliveries (clean run: {clean.delivered}), {took:.1f} s"
        )
    assert replayed.failures == [], f"seed={seed}: deliveries failed: {replayed.failures}"
    assert problems(replayed) == [], f"seed={seed}: {problems(replayed)}"
    for plan in plans:
        want = outcome(clean.memory.get_job(plan.job_id))  # type: ignore[arg-type]
        got = outcome(replayed.memory.get_job(plan.job_id))  # type: ignore[arg-type]
        assert got == want, f"seed={seed}: job {plan.job_id} ({plan}) differs from the clean run"


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_cooling_vms_claimed_under_shuffled_events_leave_nothing_behind(
    seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Which job claims a cooling VM depends on the order of one step's
    messages, so the clean run's costs are no reference here: each job ends as
    planned, with no second VM for an attempt and nothing left behind."""
    started = time.monotonic()
    plans = draw_plans(random.Random(seed), JOBS, cooling=True)
    clean = run([p.fresh() for p in plans], Delivery())
    assert clean.failures == [], f"seed={seed}: the clean run failed: {clean.failures}"
    assert problems(clean, claims=True) == [], (
        f"seed={seed}: the clean run: {problems(clean, claims=True)}"
    )
    replayed = run([p.fresh() for p in plans], Shuffled(random.Random(seed)))
    claimed = sum(1 for a in replayed.agents.values() if a.reused)
    with capsys.disabled():
        print(
            f"\nreplay with cooling seed={seed}: {JOBS} jobs, {claimed} cooling VMs claimed, "
            f"{replayed.delivered} deliveries, {time.monotonic() - started:.1f} s"
        )
    assert replayed.failures == [], f"seed={seed}: deliveries failed: {replayed.failures}"
    assert problems(replayed, claims=True) == [], f"seed={seed}: {problems(replayed, claims=True)}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_gangs_under_shuffled_redelivered_reports_of_every_node_end_as_the_clean_run(
    seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Gangs of 2 and 3: each loss takes a drawn node, and every node reports
    (the lost one's agent or the log sink, the others' gang stop, or their
    failed runs when the notice was missed), each report duplicated, late
    and shuffled. Each job ends as its clean run does, one insert an attempt."""
    started = time.monotonic()
    plans = draw_plans(random.Random(seed), GANG_JOBS, gangs=True)
    clean = run([p.fresh() for p in plans], Delivery())
    assert clean.failures == [], f"seed={seed}: the clean run failed: {clean.failures}"
    assert problems(clean) == [], f"seed={seed}: the clean run: {problems(clean)}"
    replayed = run([p.fresh() for p in plans], Shuffled(random.Random(seed)))
    with capsys.disabled():
        print(
            f"\nreplay of gangs seed={seed}: {GANG_JOBS} jobs, {replayed.delivered} deliveries "
            f"(clean run: {clean.delivered}), {time.monotonic() - started:.1f} s"
        )
    assert replayed.failures == [], f"seed={seed}: deliveries failed: {replayed.failures}"
    assert problems(replayed) == [], f"seed={seed}: {problems(replayed)}"
    for plan in plans:
        want = outcome(clean.memory.get_job(plan.job_id))  # type: ignore[arg-type]
        got = outcome(replayed.memory.get_job(plan.job_id))  # type: ignore[arg-type]
        if plan.fail_epoch is not None:
            # A failed node's finish is held for the notice, then judged by
            # the reaper's sweep or the finish's redelivery, whichever comes
            # first; the VMs run (and bill) until then, so the cost depends
            # on the delivery order, as Compute Engine's bill would.
            want, got = _without_cost(want), _without_cost(got)
        assert got == want, f"seed={seed}: job {plan.job_id} ({plan}) differs from the clean run"


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_gangs_replacing_a_lost_node_under_shuffled_reports_end_as_the_clean_run(
    seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Gangs of 2 and 3 that keep their survivors: a drawn node is lost as
    the gang sets up, in its first epochs (its TRAINING reports maybe still
    on their way) or later in training; one VM replaces it, and the gang
    regroups (or, when the replacement never comes up, is relaunched whole
    past its bound). Some lose another node while they wait: a worker, node
    0 or the replacement before its boot, each replaced too, or a 2-node
    gang's last survivor, relaunched whole. Every node's reports (the lost node's, the survivors'
    gang stops, the replacement's boot, the epochs and the finish)
    duplicated, late and shuffled. Each job ends as its clean run does: one
    replacement VM a loss, the lost VM deleted, every node told the same
    regroup."""
    started = time.monotonic()
    plans = draw_plans(random.Random(seed), GANG_JOBS, replacing=True)
    seconds = Counter(p.second_loss for p in plans if p.second_loss)
    assert set(seconds) == set(SECOND_LOSSES), f"seed={seed}: second losses {seconds}"
    regrouping = sum(1 for p in plans if p.regroups())
    assert regrouping >= GANG_JOBS // 6, f"seed={seed}: only {regrouping} plans regroup"
    times = Counter(_loss_time(p.losses[1][0]) for p in plans if p.losses)
    assert times["setting up"] and times["first epochs"], f"seed={seed}: losses {times}"
    clean = run([p.fresh() for p in plans], Delivery())
    assert clean.failures == [], f"seed={seed}: the clean run failed: {clean.failures}"
    assert problems(clean) == [], f"seed={seed}: the clean run: {problems(clean)}"
    replayed = play([p.fresh() for p in plans], SetupWatch(Shuffled(random.Random(seed))))
    regrouped = sum(1 for a in replayed.agents.values() if a.regroups)
    setting_up = sum(1 for a in replayed.agents.values() if a.regrouped_setting_up)
    with capsys.disabled():
        print(
            f"\nreplay of replacing gangs seed={seed}: {GANG_JOBS} jobs ({regrouping} regroup; "
            f"losses {dict(times)}, second losses {dict(seconds)}), "
            f"{regrouped} nodes regrouped ({setting_up} as they set up), "
            f"{len(replayed.setting_up)} losses heard setting up ({len(replayed.trained)} then "
            "training), "
            f"{replayed.delivered} deliveries (clean run: {clean.delivered}), "
            f"{time.monotonic() - started:.1f} s"
        )
    assert replayed.failures == [], f"seed={seed}: deliveries failed: {replayed.failures}"
    assert problems(replayed) == [], f"seed={seed}: {problems(replayed)}"
    for plan in plans:
        # When the gang regroups depends on when the replacement's boot is
        # heard, and the gang's VMs bill until it ends: the cost is the order's.
        want = _without_cost(outcome(clean.memory.get_job(plan.job_id)))  # type: ignore[arg-type]
        got = _without_cost(outcome(replayed.memory.get_job(plan.job_id)))  # type: ignore[arg-type]
        if plan.cancel_replacing:
            # The lost node's late epoch reports are stale once it is lost
            # (``lifecycle.check_current``), and nothing reports an epoch
            # after the cancel: the progress shown is what was heard in time.
            del want["progress"], got["progress"]
        # A loss heard before any node's boot returns the regrouped gang to
        # connecting; heard later, to a step its VMs report (not shown).
        want["history"], got["history"] = _connecting_left_out(want), _connecting_left_out(got)
        assert got == want, f"seed={seed}: job {plan.job_id} ({plan}) differs from the clean run"


def _loss_time(epoch: int) -> str:
    if epoch == 0:
        return "setting up"
    return "first epochs" if epoch < MAX_DELAY else "training"


def _connecting_left_out(ended: dict[str, Any]) -> list[tuple[str, int]]:
    history: list[tuple[str, int]] = ended["history"]
    return [
        h
        for before, h in zip([None, *history], history, strict=False)
        if not (
            h[0] == JobSubstatus.CONNECTING_SERVER
            and before
            and before[0] == JobSubstatus.REPLACING_NODE
        )
    ]


def _without_cost(ended: dict[str, Any]) -> dict[str, Any]:
    attempts = [(n, how, step) for n, how, step, _ in ended["attempts"]]
    drop = {"cost_usd", "on_demand_cost_usd", "attempts"}
    return {**{k: v for k, v in ended.items() if k not in drop}, "attempts": attempts}


def test_a_job_that_finished_just_before_its_vm_was_preempted_is_not_run_again() -> None:
    """Found by the replay: the log sink's preemption came before the
    JobFinished(exit 0) of the same attempt and started attempt 2; the late
    finish now completes the job on attempt 1 (``spotline.shared.domain.late_finish``;
    every order: ``tests/unit/test_finish_race.py``)."""
    with World() as world:
        world.plans["c"] = Plan("c", "alice", epochs=1, submit_step=1)
        for _ in range(4):  # submitted, booted, training, epoch 1: all delivered
            world.run_step()
        agent = world.agents["sl-c-a1"]
        world.advance()
        agent.finish(0)  # the trainer exited 0: JobFinished is published...
        world.cloud.preempt("sl-c-a1", zone=agent.zone, notice_s=0.0)  # ...and the VM taken
        finished = world.delivery.take(world.step)
        sink = log_entry(PROJECT, agent.zone, "sl-c-a1", agent.instance_id)
        world.deliver(world.publish("spot_preempted", sink, scheduled=False))  # comes first
        for message in finished:
            world.deliver(message)
        world.run([])
        world.settle()
    job = world.memory.get_job("c")
    assert job is not None and job.status == JobStatus.COMPLETED
    assert (job.attempt, job.preemptions) == (1, 0)
    assert problems(world) == []
