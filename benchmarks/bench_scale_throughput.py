"""Throughput: a burst of 500 submissions from 20 users, delivered to the real
``submit_job`` through the functions framework by concurrent workers (each
one a function instance), on the Firestore emulator and the local cloud
(GceCompute over its REST routes; VMs are records, so that 100 agents and
trainers do not drown the 2 cores being measured).

Measured: seconds until every job is placed on a VM or waiting for its
user's quota (5 active jobs each: 100 placed, 400 waiting), jobs placed per
second, Firestore operations per submission, and that no job got two VMs.
``--profile`` prints where one worker's time goes (cProfile).

Run: make bench-scale   (or .venv/bin/python benchmarks/bench_scale_throughput.py
[--jobs N] [--users N] [--workers N] [--profile])
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import threading
import time
from collections import Counter
from typing import Any

import functions_framework
from scale_world import REPO, ZONES, firestore_emulator, save

from functions import deps as process_deps
from functions.deps import Deps
from infra.localcloud.cloud import LocalCloud
from infra.localcloud.launchers import RecordLauncher
from infra.localcloud.quotas import DEFAULT_LIMITS
from shared.adapters.counting_store import CountingStore
from shared.adapters.firestore_store import FirestoreStore
from shared.domain.states import JobStatus, JobSubstatus
from shared.settings import Settings
from tests.pubsub_events import post

PROJECT = "bench-throughput"
_NO_QUOTA = dict.fromkeys(DEFAULT_LIMITS, 1e12)  # users' quotas bind, not the region's


def specs(jobs: int, users: int) -> list[dict[str, Any]]:
    return [
        {
            "job_id": f"burst{n:04}",
            "user": f"user{n % users:02}",
            "machine_ids": ["g2-standard-4"],
            "trainer": "digits_mlp",
            "epochs": 15,
        }
        for n in range(jobs)
    ]


def deliver(burst: list[dict[str, Any]], workers: int, profile: bool) -> tuple[float, list[int]]:
    """Every submission once, ``workers`` at a time; (seconds, HTTP statuses)."""
    app = functions_framework.create_app(
        target="submit_job", source=str(REPO / "main.py"), signature_type="cloudevent"
    )
    pending = list(enumerate(burst))
    lock, statuses = threading.Lock(), []

    def work(profiler: cProfile.Profile | None) -> None:
        client = app.test_client()
        if profiler is not None:
            profiler.enable()
        while True:
            with lock:
                if not pending:
                    break
                n, spec = pending.pop(0)
            status = post(client, PROJECT, "submit", spec, f"burst-{n}").status_code
            with lock:
                statuses.append(status)
        if profiler is not None:
            profiler.disable()

    profiler = cProfile.Profile() if profile else None
    threads = [
        threading.Thread(target=work, args=(profiler if i == 0 else None,)) for i in range(workers)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return seconds, statuses


def run(jobs: int, users: int, workers: int, profile: bool) -> dict[str, Any]:
    burst = specs(jobs, users)
    with (
        firestore_emulator(),
        LocalCloud(PROJECT, RecordLauncher(), quota_limits=_NO_QUOTA) as cloud,
    ):
        os.environ.update(
            {
                "SPOTLINE_PROJECT": PROJECT,
                "SPOTLINE_COMPUTE_ENDPOINT": cloud.endpoint,
                "SPOTLINE_ZONES": ",".join(ZONES),
                "SPOTLINE_STORAGE_ROOT": "memory://bench-throughput",
            }
        )
        settings = Settings.from_env(config_file=False)
        store = CountingStore(FirestoreStore(PROJECT))
        process_deps._current = Deps(settings, store=store)
        # One warm-up submission (another user): a cold process's first
        # request pays for the clients' imports and channels (bench_scale_coldstart).
        deliver([{**burst[0], "job_id": "warmup", "user": "warmup"}], 1, False)
        before = store.ops.snapshot()
        seconds, statuses = deliver(burst, workers, profile)
        ops = store.ops - before
        firestore = FirestoreStore(PROJECT)
        found = firestore.get_jobs(spec["job_id"] for spec in burst)
        vms = Counter(vm["labels"].get("spotline-job") for vm in cloud.list())
    placed = sum(1 for job in found.values() if job.substatus in JobSubstatus.on_vm())
    waiting = sum(1 for job in found.values() if job.substatus == JobSubstatus.WAITING_FOR_QUOTA)
    per_user = Counter(j.user for j in found.values() if j.substatus in JobSubstatus.on_vm())
    return {
        "jobs": jobs,
        "users": users,
        "workers": workers,
        "seconds": round(seconds, 2),
        "submissions_per_s": round(jobs / seconds, 1),
        "placed": placed,
        "placed_per_s": round(placed / seconds, 1),
        "waiting_for_quota": waiting,
        "other": {
            str(s): n
            for s, n in Counter(
                j.substatus for j in found.values() if j.status not in JobStatus.terminal()
            ).items()
            if s not in (*JobSubstatus.on_vm(), JobSubstatus.WAITING_FOR_QUOTA)
        },
        "missing_jobs": jobs - len(found),
        "jobs_with_two_vms": sum(1 for job_id, n in vms.items() if job_id != "warmup" and n > 1),
        "most_placed_for_one_user": max(per_user.values(), default=0),
        "statuses": dict(Counter(statuses)),
        "per_submission": {
            "reads": round(ops.reads / jobs, 1),
            "writes": round(ops.writes / jobs, 1),
            "deletes": round(ops.deletes / jobs, 1),
            "store_calls": round(ops.calls / jobs, 1),
        },
    }


def show(r: dict[str, Any]) -> None:
    print(
        f"submit burst: {r['jobs']} submissions from {r['users']} users, "
        f"{r['workers']} concurrent workers (the real submit_job, Firestore emulator)"
    )
    print(
        f"  {r['seconds']} s: {r['submissions_per_s']} submissions/s; "
        f"{r['placed']} placed ({r['placed_per_s']}/s), "
        f"{r['waiting_for_quota']} waiting for quota, "
        f"other {r['other']}, missing {r['missing_jobs']}"
    )
    print(
        f"  jobs with two VMs: {r['jobs_with_two_vms']}; most placed for one user: "
        f"{r['most_placed_for_one_user']}; HTTP statuses {r['statuses']}"
    )
    print(f"  per submission: {r['per_submission']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    results = run(args.jobs, args.users, args.workers, args.profile)
    show(results)
    print(f"  -> {save('throughput', results)}")


if __name__ == "__main__":
    main()
