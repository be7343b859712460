"""Cold start: each function's import in a fresh interpreter, and a fresh
functions-framework server's start and first request against the emulator.

The first request is the function's own message for a job that does not
exist (a submission is a real one, placed on the local cloud; a tick sweeps):
it pays what a cold instance pays before it answers, the lazy imports of the
Firestore and Compute clients and their channels included. The second
request, the same again, shows what is left once warm.

Run: make bench-scale   (or .venv/bin/python benchmarks/bench_scale_coldstart.py)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any

from bench_skeleton import import_seconds
from scale_world import REPO, ZONES, firestore_emulator, save

from infra.localcloud.cloud import LocalCloud
from infra.localcloud.launchers import RecordLauncher
from infra.localstack.processes import free_port
from infra.topology import FUNCTIONS
from shared.settings import TOPICS

PROJECT = "bench-coldstart"
IMPORT_TARGET_S = 0.4
QUIET_FRAMEWORK_S = 0.47  # functions_framework's import, BENCHMARKS.md (a quiet machine)


def message(topic: str, n: int) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    vm = {"job_id": "nosuchjob", "attempt": 1, "instance": "sl-nosuchjob-a1", "sent_at": now}
    payloads: dict[str, dict[str, Any]] = {
        "submit": {
            "user": "alice",
            "machine_ids": ["g2-standard-4"],
            "trainer": "digits_mlp",
            "job_id": f"cold{n}",
        },
        "cancel": {"job_id": "nosuchjob"},
        "vm_booted": vm,
        "epoch_done": {**vm, "epoch": 1, "epochs": 2, "step": 1},
        "job_finished": {**vm, "exit_code": 0},
        "spot_preempted": vm,
        "reaper_tick": {"sent_at": now},
    }
    data = base64.b64encode(json.dumps(payloads[topic]).encode()).decode()
    return {
        "message": {"data": data, "messageId": f"cold-{n}", "publishTime": now},
        "subscription": f"projects/{PROJECT}/subscriptions/bench",
    }


def post(url: str, body: dict[str, Any]) -> tuple[float, int]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as response:
        return time.perf_counter() - started, response.status


def wait_ready(url: str, started: float, timeout_s: float = 60.0) -> float:
    while time.perf_counter() - started < timeout_s:
        try:
            urllib.request.urlopen(url, timeout=1).close()
        except urllib.error.HTTPError:
            return time.perf_counter() - started  # it answers: an error is an answer
        except OSError:
            time.sleep(0.01)
            continue
        return time.perf_counter() - started
    raise TimeoutError(f"{url} not ready in {timeout_s} s")


def fresh_server(entry_point: str, topic: str, env: dict[str, str]) -> dict[str, Any]:
    port = free_port()
    command = [
        sys.executable, "-m", "functions_framework",
        "--target", entry_point, "--source", str(REPO / "main.py"),
        "--signature-type", "cloudevent", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    started = time.perf_counter()
    server = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        base = f"http://127.0.0.1:{port}"
        ready = wait_ready(base, started)
        url = f"{base}/projects/{PROJECT}/topics/{TOPICS[topic]}"
        first, status = post(url, message(topic, 1))
        second, _ = post(url, message(topic, 2))
        return {"ready_s": ready, "first_s": first, "second_s": second, "status": status}
    finally:
        server.terminate()
        server.wait(timeout=10)


def run(runs: int, servers: int) -> dict[str, Any]:
    results: dict[str, Any] = {"imports": {}, "servers": {}}
    # The yardstick: functions_framework's own import, measured in the same
    # minutes; a function's import over it is a ratio the machine's load
    # mostly cancels out of (BENCHMARKS.md: 0.47 s on a quiet machine).
    baseline = statistics.median(import_seconds("functions_framework", runs))
    results["functions_framework_import_s"] = round(baseline, 3)
    for function in FUNCTIONS:
        times = import_seconds(f"functions.handlers.{function.entry_point}", runs)
        results["imports"][function.entry_point] = {
            "median_s": round(statistics.median(times), 3),
            "max_s": round(max(times), 3),
            "vs_functions_framework": round(statistics.median(times) / baseline, 2),
            "at_quiet_s": round(statistics.median(times) / baseline * QUIET_FRAMEWORK_S, 2),
        }
    with firestore_emulator() as host, LocalCloud(PROJECT, RecordLauncher()) as cloud:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "FIRESTORE_EMULATOR_HOST": host,
            "SPOTLINE_PROJECT": PROJECT,
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "SPOTLINE_COMPUTE_ENDPOINT": cloud.endpoint,
            "SPOTLINE_ZONES": ",".join(ZONES),
            "SPOTLINE_STORAGE_ROOT": "memory://bench-coldstart",
        }
        for function in FUNCTIONS:
            rows = [fresh_server(function.entry_point, function.topic, env) for _ in range(servers)]
            results["servers"][function.entry_point] = {
                key: round(statistics.median(row[key] for row in rows), 3)
                for key in ("ready_s", "first_s", "second_s")
            } | {"statuses": sorted({row["status"] for row in rows})}
    return results


def show(results: dict[str, Any]) -> None:
    baseline = results["functions_framework_import_s"]
    print(
        f"cold start, medians (import target < {IMPORT_TARGET_S} s; functions_framework's "
        f"import now {baseline:.3f} s, {QUIET_FRAMEWORK_S} s on a quiet machine)"
    )
    header = ("import", "/ff", "quiet~", "ready", "1st req", "2nd req")
    print(f"  {'function':<18}" + "".join(f"{h:>9}" for h in header))
    for name, imported in results["imports"].items():
        server = results["servers"][name]
        flag = "" if imported["at_quiet_s"] < IMPORT_TARGET_S else "  OVER TARGET"
        print(
            f"  {name:<18}{imported['median_s']:>9.3f}{imported['vs_functions_framework']:>9.2f}"
            f"{imported['at_quiet_s']:>9.2f}{server['ready_s']:>9.2f}"
            f"{server['first_s']:>9.2f}{server['second_s']:>9.3f}{flag}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--import-runs", type=int, default=5)
    parser.add_argument("--servers", type=int, default=2)
    args = parser.parse_args()
    results = run(args.import_runs, args.servers)
    show(results)
    print(f"  -> {save('cold_start', results)}")


if __name__ == "__main__":
    main()
