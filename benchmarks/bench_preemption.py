"""Preemption -> replacement VM insert, on the local stack, two ways:

* event path: a preemption with its notice; the agent saves state and
  publishes spot-preempted; on_spot_preempted places the next attempt;
* reaper-only path: the VM is killed with no notice and no event; the next
  reaper sweep notices the VM is gone (the local tick is --tick-s; Cloud
  Scheduler's is 60 s, so add up to a minute in production).

Also steps lost per preemption (saved step vs the step the next attempt resumed
from). Prints numbers; asserts nothing.
Run: .venv/bin/python benchmarks/bench_preemption.py [--trials N] [--tick-s S]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from spotline.infra.cli.demo import wait_for_job  # noqa: E402
from spotline.infra.localcloud.cloud import LocalCloud  # noqa: E402
from spotline.infra.localstack.stack import LocalStack, StackOptions  # noqa: E402
from spotline.shared.adapters.firestore_store import FirestoreStore  # noqa: E402
from spotline.shared.adapters.pubsub_bus import PubsubBus  # noqa: E402
from spotline.shared.domain.lifecycle import job_id_for  # noqa: E402
from spotline.shared.domain.placement import vm_name  # noqa: E402
from spotline.shared.domain.spec import parse_spec  # noqa: E402


def trial(stack: LocalStack, with_notice: bool, index: int) -> tuple[float, int | None]:
    """One preemption; returns (seconds to the replacement insert, steps lost)."""
    host: LocalCloud = stack.cloud  # type: ignore[assignment]
    store = FirestoreStore(stack.options.project)
    spec = {
        "user": "bench",
        "machine_ids": ["g2-standard-4"],
        "trainer": "digits_mlp",
        "epochs": 3,
        "seed": index,
        "hyperparameters": {"lr": 0.01, "hidden": 64, "step_time_s": 0.02},
    }
    data = json.dumps(spec).encode()
    job_id = job_id_for(parse_spec(data), PubsubBus(stack.options.project).publish("submit", data))
    while True:
        job = store.get_job(job_id)
        if job is not None and job.epoch >= 1:
            break
        time.sleep(0.02)
    first = vm_name(job_id, 1)
    started = time.perf_counter()
    if with_notice:
        host.preempt(first, notice_s=30.0)
    else:
        host.kill(first)
    replacement = vm_name(job_id, 2)
    while host.get(replacement) is None:
        time.sleep(0.002)
    latency = time.perf_counter() - started
    done = wait_for_job(store, job_id, 180, echo=False)
    saved = done.attempts[0].checkpoint_step
    resumed = done.attempts[1].resumed_from_step if len(done.attempts) > 1 else None
    lost = saved - resumed if saved is not None and resumed is not None else None
    return latency, lost


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--tick-s", type=float, default=5.0)
    args = parser.parse_args()
    options = StackOptions(tick_s=args.tick_s, heartbeat_s=2.0)
    with tempfile.TemporaryDirectory() as tmp, LocalStack(Path(tmp), options) as stack:
        for with_notice, label in (
            (True, "event path (notice)"),
            (False, "reaper-only (no notice)"),
        ):
            results = [trial(stack, with_notice, i) for i in range(args.trials)]
            latencies = [latency for latency, _ in results]
            lost = [steps for _, steps in results if steps is not None]
            print(
                f"{label:<26} preemption -> replacement insert: "
                f"p50 {statistics.median(latencies):.2f} s  p95 {percentile(latencies, 0.95):.2f} s"
                f"  max {max(latencies):.2f} s  (n={len(latencies)}, tick {args.tick_s:g} s)"
            )
            if lost:
                print(
                    f"{'':<26} steps lost per preemption: max {max(lost)}, mean "
                    f"{statistics.mean(lost):.2f} (n={len(lost)})"
                )
            else:
                print(f"{'':<26} steps lost: no resume recorded (no state saved on the notice)")


if __name__ == "__main__":
    main()
