"""Firestore operations per job: a 15-epoch job whose first Spot VM is
preempted after epoch 7, driven through the real handlers on the Firestore
emulator, every store call counted at the port (``CountingStore``: reads =
documents returned, as Firestore bills them) and priced.

The job's events come from the replay suite's agent stand-in
(``tests/replay.py``: boot, phases, an epoch and a heartbeat a step, the
agent's preemption notice, the end), delivered once each, in order; the reaper
ticks every 30 simulated seconds. Reaper reads are shown apart: a sweep's cost
per running job is paid every minute the job runs, whatever its epochs.

Run: make bench-scale   (or .venv/bin/python benchmarks/bench_scale_ops.py)
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from scale_world import firestore_emulator, save

from spotline.shared.adapters.counting_store import CountingStore, Operations
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from tests.replay import PROJECT, Plan, Published, World

EPOCHS, PREEMPTED_AT = 15, 8  # the VM is taken as epoch 8 would start
# Firestore Standard edition, USD per 100,000 operations
# (multi-region: cloud.google.com/firestore/pricing; regional: as third-party
# guides quote its per-location table, deletes assumed at half; 2026-11-24).
RATES = {
    "multi-region (nam5)": {"reads": 0.06, "writes": 0.18, "deletes": 0.02},
    "regional (us-central1)": {"reads": 0.03, "writes": 0.09, "deletes": 0.01},
}


class CountedWorld(World):
    """The replay world on Firestore, with each delivery's operations kept by kind."""

    def __init__(self) -> None:
        self.firestore = FirestoreStore(PROJECT)
        self.counted = CountingStore(self.firestore)
        super().__init__(wrap_store=lambda _memory: self.counted)
        self.by_kind: dict[str, list[Operations]] = defaultdict(list)

    def deliver(self, message: Published) -> bool:
        before = self.counted.ops.snapshot()
        ok = super().deliver(message)
        if message.topic != "reaper_page":  # a tick's count holds its pages'
            self.by_kind[kind(message)].append(self.counted.ops - before)
        return ok


def kind(message: Published) -> str:
    """The event's name; an epoch_done message without an epoch is a heartbeat."""
    if message.topic == "epoch_done" and "epoch" not in json.loads(message.data):
        return "heartbeat"
    return message.topic


def run() -> dict[str, Any]:
    plan = Plan("bench1", "alice", EPOCHS, submit_step=1, losses={1: (PREEMPTED_AT, "agent")})
    with firestore_emulator(), CountedWorld() as world:
        world.plans[plan.job_id] = plan
        while world.step < 200:
            world.run_step()
            job = world.firestore.get_job(plan.job_id)
            if job is not None and job.status in JobStatus.terminal():
                break
        assert job is not None, "the job was never created"
        rows = {
            name: {
                "events": len(ops),
                "reads": sum(o.reads for o in ops),
                "writes": sum(o.writes for o in ops),
                "deletes": sum(o.deletes for o in ops),
            }
            for name, ops in sorted(world.by_kind.items())
        }
        return {
            "job": {"status": job.status, "attempts": job.attempt, "epochs": job.epoch},
            "failures": world.failures,
            "by_event": rows,
        }


def priced(rows: dict[str, dict[str, int]], reaper: bool) -> dict[str, Any]:
    """Totals (with or without the reaper's sweeps) and their price per 1,000 jobs."""
    kept = {k: v for k, v in rows.items() if reaper or k != "reaper_tick"}
    totals = {op: sum(row[op] for row in kept.values()) for op in ("reads", "writes", "deletes")}
    prices = {
        where: round(sum(totals[op] * rate[op] / 100_000 for op in totals) * 1000, 4)
        for where, rate in RATES.items()
    }
    return {**totals, "usd_per_1000_jobs": prices}


def show(results: dict[str, Any]) -> None:
    job = results["job"]
    print(
        f"Firestore operations for one {EPOCHS}-epoch job, one preemption "
        f"(ended {job['status']}, attempt {job['attempts']}, epoch {job['epochs']})"
    )
    print(f"  {'event':<16}{'events':>8}{'reads':>8}{'writes':>8}{'deletes':>9}{'reads/event':>13}")
    for name, row in results["by_event"].items():
        per = row["reads"] / row["events"]
        figures = "".join(f"{row[k]:>8}" for k in ("events", "reads", "writes"))
        print(f"  {name:<16}{figures}{row['deletes']:>9}{per:>13.1f}")
    for label, key in (("without the reaper", "handlers"), ("with the reaper", "all")):
        total = results[key]
        print(
            f"  total {label}: {total['reads']} reads, {total['writes']} writes, "
            f"{total['deletes']} deletes; USD per 1,000 such jobs: {total['usd_per_1000_jobs']}"
        )
    if results["failures"]:
        print(f"  !!! deliveries that failed: {results['failures']}")


def main() -> None:
    results = run()
    results["handlers"] = priced(results["by_event"], reaper=False)
    results["all"] = priced(results["by_event"], reaper=True)
    results["rates_usd_per_100k"] = RATES
    show(results)
    print(f"  -> {save('ops_per_job', results)}")


if __name__ == "__main__":
    main()
