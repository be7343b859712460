"""End to end: a burst of 500 submissions from 20 users published to the
Pub/Sub emulator's ``spotline-submit`` topic, delivered by its push
subscription to the local stack's ``submit_job`` server (functions-framework
under gunicorn: ``--processes`` worker processes, each threaded), as
``spotline up`` runs it, with every other function and topic in place (the
jobs' events are pushed to ``notify_webhook``). VMs are records
(``StackOptions.record_vms``): the local cloud makes them, nothing boots, so
that 100 agents do not drown the 2 cores being measured. The reaper's tick
is held off (an hour) so that only the burst's work is timed.

Measured: seconds from the first publish until every job is placed on a VM
or waiting for its user's quota (each job's last transition time, read from
its history), that no job got two VMs and no user more than its quota, and
the CPU seconds of each part of the stack with their shares of the cores.

Run: make bench-scale   (or .venv/bin/python benchmarks/bench_scale_e2e_burst.py
[--jobs N] [--users N] [--processes N] [--warmup-jobs N])
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_scale_throughput import _NO_QUOTA, specs
from cpu_shares import CpuMeter, group_cpu_s, pid_cpu_s
from scale_world import save

from spotline.infra.localstack.stack import LocalStack, StackOptions
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.pubsub_bus import PubsubBus
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus

PROJECT = "bench-e2e-burst"
_QUIET_CPU_S = 0.05  # CPU seconds a second: a server with nothing to do
_SETTLED = frozenset({*JobSubstatus.on_vm(), JobSubstatus.WAITING_FOR_QUOTA})


def _is_settled(job: JobDoc) -> bool:
    return job.substatus in _SETTLED or job.status in JobStatus.terminal()


def publish(burst: list[dict[str, Any]]) -> float:
    """Each user publishes their own submissions (a thread each), as
    ``spotline submit`` does; the seconds it took."""
    bus = PubsubBus(PROJECT)
    by_user: dict[str, list[bytes]] = {}
    for spec in burst:
        by_user.setdefault(spec["user"], []).append(json.dumps(spec).encode())

    def send(messages: list[bytes]) -> None:
        for message in messages:
            bus.publish("submit", message)

    started = time.perf_counter()
    threads = [threading.Thread(target=send, args=(m,)) for m in by_user.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def wait_settled(ids: list[str], busy: Callable[[], float], timeout_s: float) -> dict[str, JobDoc]:
    """Read the unsettled jobs each time ``submit_job`` has gone quiet (its
    CPU seconds, ``busy``, flat for a second), until every one is settled.
    Not a poll every second: each read is work for the emulator being
    measured, and the time is taken from the jobs' histories anyway."""
    store = FirestoreStore(PROJECT)
    found: dict[str, JobDoc] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pending = [i for i in ids if i not in found or not _is_settled(found[i])]
        if not pending:
            break
        _quiet(busy, deadline)
        found.update(store.get_jobs(pending))
    return found


def _quiet(busy: Callable[[], float], deadline: float) -> None:
    last = busy()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = busy()
        if now - last < _QUIET_CPU_S:
            return
        last = now


def run(
    jobs: int, users: int, processes: int, warmup_jobs: int, timeout_s: float
) -> dict[str, Any]:
    options = StackOptions(
        project=PROJECT,
        tick_s=3600.0,
        record_vms=True,
        quota_limits=_NO_QUOTA,
        function_processes={"submit_job": processes},
    )
    with tempfile.TemporaryDirectory() as tmp, LocalStack(Path(tmp), options) as stack:
        assert stack.firestore and stack.pubsub and stack.cloud
        # Every worker process's first request pays for the clients' imports
        # (bench_scale_coldstart), and the emulators' java is slow until its
        # JIT has compiled the hot paths: a burst first, unmeasured.
        warm = specs(warmup_jobs, users, "warm")
        publish(warm)
        submit = stack.functions["submit_job"].pid
        wait_settled([s["job_id"] for s in warm], lambda: group_cpu_s(submit), timeout_s)
        others = [p.pid for name, p in stack.functions.items() if name != "submit_job"]
        meter = CpuMeter(
            {
                "submit_job": lambda: group_cpu_s(submit),
                "other_functions": lambda: sum(group_cpu_s(pid) for pid in others),
                "firestore_emulator": lambda: group_cpu_s(stack.firestore.process.pid),
                "pubsub_emulator": lambda: group_cpu_s(stack.pubsub.process.pid),
                "local_cloud_and_driver": lambda: pid_cpu_s(os.getpid()),
            }
        )
        burst = specs(jobs, users, "burst")
        meter.start()
        started_at, started = datetime.now(UTC), time.perf_counter()
        publish_s = publish(burst)
        found = wait_settled([s["job_id"] for s in burst], lambda: group_cpu_s(submit), timeout_s)
        cpu = meter.stop(time.perf_counter() - started)
        vm_jobs = Counter(vm["labels"].get("spotline-job", "") for vm in stack.cloud.list())
    settled = [j for j in found.values() if _is_settled(j)]
    last = max((j.history[-1].at for j in settled), default=started_at)
    seconds = (last - started_at).total_seconds()
    on_vm = [j for j in found.values() if j.substatus in JobSubstatus.on_vm()]
    per_user = Counter(j.user for j in on_vm)
    return {
        "jobs": jobs,
        "users": users,
        "submit_processes": processes,
        "warmup_jobs": warmup_jobs,
        "load_average_before": os.getloadavg()[0],
        "publish_s": round(publish_s, 2),
        "seconds": round(seconds, 2),
        "submissions_per_s": round(jobs / seconds, 1) if seconds > 0 else None,
        "placed": len(on_vm),
        "waiting_for_quota": sum(
            1 for j in found.values() if j.substatus == JobSubstatus.WAITING_FOR_QUOTA
        ),
        "unsettled": jobs - len(settled),
        "other": dict(Counter(str(j.substatus) for j in settled if j.substatus not in _SETTLED)),
        "jobs_with_two_vms": sum(1 for s in burst if vm_jobs[s["job_id"]] > 1),
        "most_placed_for_one_user": max(per_user.values(), default=0),
        "cpu": cpu,
    }


def show(r: dict[str, Any]) -> None:
    print(
        f"end-to-end burst: {r['jobs']} submissions from {r['users']} users published to "
        f"spotline-submit, pushed to submit_job ({r['submit_processes']} processes); "
        f"load average {r['load_average_before']:.2f}"
    )
    print(
        f"  published in {r['publish_s']} s; all settled after {r['seconds']} s: "
        f"{r['submissions_per_s']} submissions/s; {r['placed']} placed, "
        f"{r['waiting_for_quota']} waiting for quota, other {r['other']}, "
        f"unsettled {r['unsettled']}"
    )
    print(
        f"  jobs with two VMs: {r['jobs_with_two_vms']}; most placed for one user: "
        f"{r['most_placed_for_one_user']}"
    )
    cpu = r["cpu"]
    print(f"  CPU s: {cpu['cpu_s']}; idle {cpu['idle_share']:.0%} of {cpu['cores']} cores")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--processes", type=int, default=3, help="submit_job's worker processes")
    parser.add_argument("--warmup-jobs", type=int, default=1000, help="an unmeasured burst first")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    results = run(args.jobs, args.users, args.processes, args.warmup_jobs, args.timeout)
    show(results)
    print(f"  -> {save('throughput_end_to_end', results)}")


if __name__ == "__main__":
    main()
