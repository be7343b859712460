"""The reaper at scale, on the Firestore emulator, over 10,000 active jobs,
their instances and VMs: the tick and each of its pages as their own
invocations would run them (``spotline.functions.ops.sweep_pages``), the first time,
when every job's cost is due; then a whole sweep in one process
(``spotline.functions.ops.sweep.sweep``) once the costs are fresh; then that again
with 100,000 terminal jobs added. Reads are counted at the store port
(``CountingStore``); terminal jobs must add none.

Run: make bench-scale   (or .venv/bin/python benchmarks/bench_scale_reaper.py
[--active N] [--terminal N])
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from scale_world import (
    ZONES,
    batch_write,
    clone,
    completed,
    compute_client,
    firestore_emulator,
    save,
    template,
    user_of,
)

from spotline.functions.deps import Deps
from spotline.functions.ops.sweep import sweep
from spotline.functions.ops.sweep_pages import plan, run_page
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.instances import spec_from_request
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.infra.localcloud.quotas import DEFAULT_LIMITS
from spotline.shared.adapters.counting_store import CountingStore
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import InstanceDoc, JobDoc, UserDoc
from spotline.shared.domain.vms import MANAGED_LABEL
from spotline.shared.settings import Settings

PROJECT = "bench-reaper"
_NO_QUOTA = dict.fromkeys(DEFAULT_LIMITS, 1e12)  # 10,000 GPUs in one region


def seed_active(store: FirestoreStore, cloud: LocalCloud, active: int, now: datetime) -> float:
    """``active`` TRAINING jobs, each on its executing VM, five per user; seconds."""
    t = template(now)
    jobs: dict[str, JobDoc] = {}
    instances: dict[str, InstanceDoc] = {}
    users: dict[str, UserDoc] = {}
    vms = []
    for n in range(active):
        job, instance, vm = clone(t, n)
        # Its events published, as a running job's are: the template's outbox,
        # unpublishable here (no bus), made stage 5 try 10,000 publishes.
        # Never priced yet: the first sweep prices every one (the worst case).
        job = job.model_copy(update={"pending_events": [], "cost_as_of": None})
        jobs[job.job_id], instances[instance.name] = job, instance
        vms.append(spec_from_request({**vm, "machine_type": t.instance.machine_type}))
        user = users.setdefault(user_of(n), UserDoc(user=user_of(n), updated_at=now))
        user.active_jobs.append(job.job_id)
        user.active_instances.append(instance.name)
    cloud.model.create(vms)  # at once: one quota check, not one per VM
    return (
        batch_write(store.client, "jobs", jobs.items())
        + batch_write(store.client, "instances", instances.items())
        + batch_write(store.client, "users", users.items())
    )


def seed_terminal(store: FirestoreStore, first: int, count: int, now: datetime) -> float:
    t = template(now - timedelta(days=1))
    return batch_write(store.client, "jobs", completed(t, first, count, now - timedelta(hours=1)))


def progress(line: str) -> None:
    print(f"  ... {line}", file=sys.stderr, flush=True)


def timed_sweep(deps: Deps, store: CountingStore, now: datetime) -> dict[str, Any]:
    before = store.ops.snapshot()
    started = time.perf_counter()
    counts = sweep(deps, now)
    seconds = time.perf_counter() - started
    ops = store.ops - before
    return {
        "seconds": round(seconds, 2),
        "reads": ops.reads,
        "writes": ops.writes,
        "deletes": ops.deletes,
        "outcomes": dict(counts),
        "reads_by_method": {k: v for k, v in sorted(ops.by_method.items()) if k.endswith("reads")},
    }


def timed_pages(deps: Deps, store: CountingStore, now: datetime) -> dict[str, Any]:
    """The tick's listing, then each page, one after another, each timed:
    Cloud Functions would run the pages at once, each in its own instance."""
    before = store.ops.snapshot()
    started = time.perf_counter()
    pages = plan(deps, now)
    tick_s = time.perf_counter() - started
    tick_ops = store.ops - before
    begun = time.perf_counter()  # the tick's VM listing, once more on its own
    deps.compute.list({MANAGED_LABEL: "true"})
    vm_listing_s = time.perf_counter() - begun
    seconds: dict[str, list[float]] = {}
    for page in pages:
        begun = time.perf_counter()
        run_page(deps, page)
        seconds.setdefault(page.kind, []).append(time.perf_counter() - begun)
    ops = store.ops - before
    slowest = max(s for kind in seconds.values() for s in kind)
    return {
        "tick_s": round(tick_s, 2),
        "tick_reads": tick_ops.reads,
        "tick_vm_listing_s": round(vm_listing_s, 2),
        "pages": {kind: len(times) for kind, times in seconds.items()},
        "page_s": {
            kind: {"max": round(max(t), 2), "median": round(sorted(t)[len(t) // 2], 2)}
            for kind, t in seconds.items()
        },
        "largest_page_bytes": max(len(p.model_dump_json()) for p in pages),
        "pages_one_after_another_s": round(sum(sum(t) for t in seconds.values()), 2),
        "tick_then_slowest_page_s": round(tick_s + slowest, 2),
        "reads": ops.reads,
        "writes": ops.writes,
        "reads_by_method": {k: v for k, v in sorted(ops.by_method.items()) if k.endswith("reads")},
    }


def run(active: int, terminal: int) -> dict[str, Any]:
    now = datetime.now(UTC)
    results: dict[str, Any] = {"active_jobs": active, "terminal_jobs": terminal}
    with (
        firestore_emulator(),
        LocalCloud(PROJECT, RecordLauncher(), quota_limits=_NO_QUOTA) as cloud,
    ):
        firestore = FirestoreStore(PROJECT)
        results["seed_active_s"] = round(seed_active(firestore, cloud, active, now), 1)
        progress(f"seeded {active} active jobs in {results['seed_active_s']} s; sweeping")
        store = CountingStore(FirestoreStore(PROJECT))
        settings = Settings(project=PROJECT, zones=ZONES)
        deps = Deps(settings, store=store, compute=compute_client(cloud))
        results["paged"] = timed_pages(deps, store, now + timedelta(seconds=20))
        save("reaper", results)  # kept should the rest not finish
        progress(f"paged: {results['paged']['tick_then_slowest_page_s']} s; a whole sweep")
        results["sweep_active"] = timed_sweep(deps, store, now + timedelta(seconds=40))
        save("reaper", results)
        progress(f"swept in {results['sweep_active']['seconds']} s; seeding {terminal} terminal")
        results["seed_terminal_s"] = round(seed_terminal(firestore, active, terminal, now), 1)
        progress(f"seeded in {results['seed_terminal_s']} s; sweeping")
        results["sweep_with_terminal"] = timed_sweep(deps, store, now + timedelta(seconds=60))
    return results


def show(results: dict[str, Any]) -> None:
    print(
        f"reaper sweep, Firestore emulator, {results['active_jobs']} active jobs + instances + VMs"
    )
    paged = results["paged"]
    print(
        f"  tick and pages, every cost due: tick {paged['tick_s']} s ({paged['tick_reads']} reads;"
        f" listing the VMs alone {paged['tick_vm_listing_s']} s),"
        f" pages {paged['pages']}, slowest by kind {paged['page_s']},"
        f" largest page {paged['largest_page_bytes']} bytes"
    )
    print(
        f"    tick + slowest page: {paged['tick_then_slowest_page_s']} s (pages at once, as"
        f" Cloud Functions runs them); one after another: {paged['pages_one_after_another_s']} s;"
        f" {paged['reads']} reads, {paged['writes']} writes"
    )
    print("  whole sweeps in one process, costs fresh:")
    print(f"  {'':<34}{'seconds':>9}{'reads':>9}{'writes':>9}{'deletes':>9}")
    for key, label in (
        ("sweep_active", "active only"),
        ("sweep_with_terminal", f"+ {results['terminal_jobs']} terminal jobs"),
    ):
        row = results[key]
        figures = "".join(f"{row[k]:>9}" for k in ("seconds", "reads", "writes", "deletes"))
        print(f"  {label:<34}{figures}")
    added = results["sweep_with_terminal"]["reads"] - results["sweep_active"]["reads"]
    print(f"  reads added by the terminal jobs: {added}")
    print(f"  reads by call: {results['sweep_active']['reads_by_method']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--active", type=int, default=10_000)
    parser.add_argument("--terminal", type=int, default=100_000)
    args = parser.parse_args()
    results = run(args.active, args.terminal)
    show(results)
    print(f"  -> {save('reaper', results)}")


if __name__ == "__main__":
    main()
