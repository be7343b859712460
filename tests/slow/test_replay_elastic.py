"""Elastic gangs (``min_nodes``) in the replay (``tests.replay``): a 3-node
gang loses a node in training, the other two shrink and train at 2 while
the replacement boots, are asked to stop (``spotline-gang-stop``) once it
is up, and grow back to 3; or lose a node of the smaller gang, wait below
``min_nodes`` for both replacements, and grow back whole. Every node's
reports (the losses, the stops, the boots, the epochs, the finish)
duplicated, late and shuffled; each job ends as its clean run does. Some
train to their end at 2 before the replacement is up; some lose a node of
the smaller gang as it is asked to grow back.

``SPOTLINE_REPLAY_SEED`` (default: seed 1) picks the draws, as in
``tests/slow/test_replay.py``.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import pytest

from tests.replay import SMALLER_LOSSES, Delivery, Plan, Shuffled, World, draw_elastic
from tests.replay_checks import outcome, problems
from tests.slow.test_replay import _connecting_left_out, _without_cost, run

JOBS = 10  # each course of ``draw_elastic`` twice
SEEDS = [int(s) for s in os.environ.get("SPOTLINE_REPLAY_SEED", "1").split(",")]


def resize_problems(world: World) -> list[str]:
    """Each elastic gang shrank and grew back (``JobDoc.resizes``), its
    survivors told a regroup of the smaller gang first, its attempt's record
    the step it grew back from."""
    found = []
    for plan in world.plans.values():
        job = world.memory.get_job(plan.job_id)
        assert job is not None
        # The smaller gang's worker lost as it is asked to grow back: heard
        # after the head's stop, the whole gang regrouped first (the lost
        # node cannot be told), then the two left shrink again (or not,
        # their replacement up by then) and grow back.
        again = 2 if plan.second_loss == "asked-worker" else 0
        if not plan.resizes() <= job.resizes <= plan.resizes() + again:
            found.append(f"{plan.job_id}: {job.resizes} resizes, planned {plan.resizes()}")
        saved = job.attempts[-1].checkpoint_step if job.attempts else None
        if saved != plan.regrouped_from and not head_lost_unsaid(plan):
            resumed = plan.regrouped_from
            found.append(f"{plan.job_id}: records step {saved}, regrouped from {resumed}")
        sizes = [
            len(regroup.nodes)
            for agent in world.agents.values()
            if agent.plan.job_id == plan.job_id
            for regroup in agent.regroups
        ]
        if plan.min_nodes is not None and plan.min_nodes not in sizes:
            found.append(f"{plan.job_id}: never trained at {plan.min_nodes} (told {sizes})")
    return found


def head_lost_unsaid(plan: Plan) -> bool:
    """Open: the gang's head lost, heard only from the log sink, and no stop
    after it (the gang waits below ``min_nodes``, or trains to its end at
    the smaller size). Its save counts once its notice is over, and the gang
    restarts from the newest checkpoint (the head's last epoch), but the
    attempt's record keeps an older step, or none
    (``tests/unit/test_lost_head_record.py``)."""
    smaller_head = plan.second_loss == "smaller-head" and plan.second_report == "log-sink"
    first_head = plan.ends_smaller and plan.lost_node == 0 and plan.losses[1][1] == "log-sink"
    return smaller_head or first_head


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_elastic_gangs_shrink_and_grow_back_under_shuffled_reports_as_in_the_clean_run(
    seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    plans = draw_elastic(random.Random(seed), JOBS)
    seconds = Counter(p.second_loss for p in plans)
    assert set(seconds) == {"", *SMALLER_LOSSES}, f"seed={seed}: second losses {seconds}"
    assert any(p.ends_smaller for p in plans), f"seed={seed}: none ends at the smaller size"
    clean = run([p.fresh() for p in plans], Delivery())
    assert clean.failures == [], f"seed={seed}: the clean run failed: {clean.failures}"
    assert problems(clean) == [], f"seed={seed}: the clean run: {problems(clean)}"
    assert resize_problems(clean) == [], f"seed={seed}: the clean run: {resize_problems(clean)}"
    replayed = run([p.fresh() for p in plans], Shuffled(random.Random(seed)))
    with capsys.disabled():  # the numbers, not the functions' log lines
        print(
            f"\nreplay of elastic gangs seed={seed}: {JOBS} jobs (second losses "
            f"{dict(seconds)}), {replayed.delivered} deliveries (clean run: {clean.delivered}), "
            f"{time.monotonic() - started:.1f} s"
        )
    assert replayed.failures == [], f"seed={seed}: deliveries failed: {replayed.failures}"
    assert problems(replayed) == [], f"seed={seed}: {problems(replayed)}"
    assert resize_problems(replayed) == [], f"seed={seed}: {resize_problems(replayed)}"
    for plan in plans:
        # When the gang shrinks and grows depends on when the reports are
        # heard, and the gang's VMs bill until it ends: the cost is the order's.
        # So is the step it grew back from (``resize_problems`` checks it).
        want = _without_cost(outcome(clean.memory.get_job(plan.job_id)))  # type: ignore[arg-type]
        got = _without_cost(outcome(replayed.memory.get_job(plan.job_id)))  # type: ignore[arg-type]
        want["attempts"] = [(n, how) for n, how, _ in want["attempts"]]
        got["attempts"] = [(n, how) for n, how, _ in got["attempts"]]
        want["history"], got["history"] = _connecting_left_out(want), _connecting_left_out(got)
        if plan.second_loss == "asked-worker":
            # Its regroups and resizes are the order's (``resize_problems``).
            del want["history"], got["history"]
        assert got == want, f"seed={seed}: job {plan.job_id} ({plan}) differs from the clean run"
