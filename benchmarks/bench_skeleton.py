"""Walking-skeleton numbers: cold import time of each function module,
`spotline up` to ready, and publish -> VM insert latency on the local stack.

Prints numbers; asserts nothing (these machines are shared and noisy).
Run: make bench   (or .venv/bin/python benchmarks/bench_skeleton.py [--jobs N])
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from spotline.infra.cli.demo import wait_for_job  # noqa: E402
from spotline.infra.localstack.stack import LocalStack, StackOptions  # noqa: E402
from spotline.infra.topology import FUNCTIONS  # noqa: E402
from spotline.shared.adapters.firestore_store import FirestoreStore  # noqa: E402
from spotline.shared.adapters.pubsub_bus import PubsubBus  # noqa: E402
from spotline.shared.domain.lifecycle import job_id_for  # noqa: E402
from spotline.shared.domain.spec import parse_spec  # noqa: E402

_IMPORT_PROBE = (
    "import time, importlib; t = time.perf_counter(); importlib.import_module('{module}'); "
    "print(time.perf_counter() - t)"
)


def import_seconds(module: str, runs: int) -> list[float]:
    """Import time of ``module`` in a fresh interpreter, as a cold start pays it."""
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _IMPORT_PROBE.format(module=module)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        times.append(float(out.stdout.strip()))
    return times


def publish_to_insert(stack: LocalStack, jobs: int) -> list[float]:
    assert stack.cloud is not None
    spec = json.loads((REPO / "examples" / "digits.json").read_text())
    store = FirestoreStore(stack.options.project)
    bus = PubsubBus(stack.options.project)
    latencies = []
    for i in range(jobs):
        data = json.dumps({**spec, "epochs": 1, "description": f"bench {i}"}).encode()
        started = time.perf_counter()
        message_id = bus.publish("submit", data)
        job_id = job_id_for(parse_spec(data), message_id)
        while not any(vm["labels"].get("spotline-job") == job_id for vm in stack.cloud.list()):
            time.sleep(0.002)
        latencies.append(time.perf_counter() - started)
        wait_for_job(store, job_id, timeout_s=180, echo=False)
    return latencies


def show(name: str, values: list[float]) -> None:
    print(
        f"{name:<44} median {statistics.median(values):7.3f} s   "
        f"min {min(values):7.3f}   max {max(values):7.3f}   (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--import-runs", type=int, default=5)
    parser.add_argument("--stack-runs", type=int, default=2)
    args = parser.parse_args()

    print("cold import, fresh interpreter (target < 0.4 s for modules that create no VMs)")
    for function in FUNCTIONS:
        show(
            f"  spotline.functions.handlers.{function.entry_point}",
            import_seconds(f"spotline.functions.handlers.{function.entry_point}", args.import_runs),
        )
    show(
        "  functions_framework (paid by every server)",
        import_seconds("functions_framework", args.import_runs),
    )
    show(
        "  google.cloud.compute_v1 (lazy, on first VM call)",
        import_seconds("google.cloud.compute_v1", args.import_runs),
    )

    ready, emulators = [], []
    for run in range(args.stack_runs):
        with tempfile.TemporaryDirectory() as tmp:
            stack = LocalStack(Path(tmp), StackOptions(tick_s=5.0, heartbeat_s=2.0))
            with stack:
                ready.append(stack.timings["ready_s"])
                emulators.append(stack.timings["emulators_s"])
                if run == args.stack_runs - 1:
                    latencies = publish_to_insert(stack, args.jobs)
    print("\nlocal stack")
    show("  `spotline up` to ready", ready)
    show("  of which: both emulators ready", emulators)
    show("  publish -> VM insert (GceCompute, local cloud)", latencies)


if __name__ == "__main__":
    main()
