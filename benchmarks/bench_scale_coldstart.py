"""Cold start: each function's import in a fresh interpreter, and a fresh
functions-framework server's start, first and second request.

Each request is an event its function acts on, for a job made ready for it
in the Firestore emulator by the real submit path, on the local cloud, with
the Pub/Sub emulator taking the state changes it publishes
(``coldstart_events``): the first request pays what a cold instance pays
before it answers, the lazy imports of the Firestore, Compute and Pub/Sub
clients, their channels and first calls. The second request, another job's
same event, shows what is left once warm. Every event is checked to have
taken effect: a refused one (a job that does not exist) measures nothing.

The servers run with ``-X importtime``: the lines a request adds to a
server's stderr are the modules it imported, and their seconds.

Run: make bench-scale   (or .venv/bin/python benchmarks/bench_scale_coldstart.py)
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coldstart_events import World, create_topics, event_for, webhook_receiver
from scale_world import REPO, ZONES, firestore_emulator, save

from spotline.functions.deps import Deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.infra.localcloud.quotas import DEFAULT_LIMITS
from spotline.infra.localstack.emulators import start_pubsub
from spotline.infra.localstack.processes import free_port
from spotline.infra.topology import FUNCTIONS
from spotline.shared.settings import TOPICS, Settings

PROJECT = "bench-coldstart"
IMPORT_TARGET_S = 0.4
QUIET_FRAMEWORK_S = 0.47  # functions_framework's import, BENCHMARKS.md (a quiet machine)
# What every function's server imports: main.py, which names every entry point
# (reported as "main", the name functions-framework loads it under).
SOURCE = "main"
SOURCE_MODULE = "spotline.functions.main"
# Every job here holds a GPU VM: a project whose quotas have room for them all
# (the local cloud's default is 16 GPUs in the region).
ROOMY = {metric: 10_000.0 for metric in DEFAULT_LIMITS}


def message(payload: dict[str, Any], message_id: str) -> dict[str, Any]:
    """The push envelope the Pub/Sub emulator POSTs, published now."""
    now = datetime.now(UTC).isoformat()
    data = base64.b64encode(json.dumps(payload).encode()).decode()
    return {
        "message": {"data": data, "messageId": message_id, "publishTime": now},
        "subscription": f"projects/{PROJECT}/subscriptions/bench",
    }


@contextmanager
def pubsub_emulator() -> Iterator[str]:
    """A Pub/Sub emulator with spotline's topics; PUBSUB_EMULATOR_HOST points at it."""
    with tempfile.TemporaryDirectory() as logs:
        emulator = start_pubsub(Path(logs), PROJECT)
        try:
            emulator.wait_ready()
            os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host
            create_topics(PROJECT)
            yield emulator.host
        finally:
            emulator.stop()


def imported(stderr: bytes) -> dict[str, Any]:
    """The ``-X importtime`` lines in ``stderr``: the seconds of every module
    imported, and the biggest imports made at the top (each with what it pulled in)."""
    total_us, tops = 0, []
    for line in stderr.decode(errors="replace").splitlines():
        if not line.startswith("import time:") or "[us]" in line:
            continue
        own, cumulative, name = line.removeprefix("import time:").split("|", 2)
        total_us += int(own)
        if not name.startswith("  "):  # one space, then two more per level below
            tops.append((int(cumulative), name.strip()))
    biggest = {name: round(us / 1e6, 3) for us, name in sorted(tops, reverse=True)[:3]}
    return {"s": round(total_us / 1e6, 3), "biggest": biggest}


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


def cpu_seconds(pid: int) -> float:
    """The CPU seconds used so far by process ``pid`` and its children: the
    framework's gunicorn serves from a worker process it forks."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # After the name (which may hold spaces): state, ppid, ..., utime, stime.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def fresh_server(entry_point: str, topic: str, env: dict[str, str], world: World) -> dict[str, Any]:
    """One fresh server's start and two requests, each an event made ready
    for it; what each request imported."""
    key = f"{topic}-{free_port()}"
    with redirect_stdout(io.StringIO()):  # the log lines of making the jobs
        events = [event_for(topic, world, f"{key}-{n}") for n in (1, 2)]
    port = free_port()
    command = [
        sys.executable, "-X", "importtime", "-m", "functions_framework",
        "--target", entry_point, "--source", str(REPO / "functions" / "main.py"),
        "--signature-type", "cloudevent", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        server = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            base = f"http://127.0.0.1:{port}"
            ready = wait_ready(base, started)
            url = f"{base}/projects/{PROJECT}/topics/{TOPICS[topic]}"
            row: dict[str, Any] = {"ready_s": ready}
            for n, event in zip(("first", "second"), events, strict=True):
                stderr.seek(0, os.SEEK_END)
                before, cpu = stderr.tell(), cpu_seconds(server.pid)
                row[f"{n}_s"], row["status"] = post(url, message(event.payload, f"{key}-{n}"))
                row[f"{n}_cpu_s"] = cpu_seconds(server.pid) - cpu
                stderr.seek(before)
                row[f"{n}_imports"] = imported(stderr.read())
        finally:
            server.terminate()
            server.wait(timeout=10)
    for event in events:
        dropped = event.took_effect()
        if dropped is not None:
            raise RuntimeError(f"{entry_point}: the event was not acted on ({dropped})")
    return row


_IMPORT_PROBE = (
    "import importlib, time; w, c = time.perf_counter(), time.process_time(); "
    "importlib.import_module({module!r}); print(time.perf_counter() - w, time.process_time() - c)"
)


def import_times(modules: list[str], runs: int) -> dict[str, list[tuple[float, float]]]:
    """Each module's import in a fresh interpreter, as a cold start pays it:
    (wall, CPU) seconds, ``runs`` times. The modules take turns in each round,
    so that the machine's load, which comes and goes, falls alike on each."""
    times: dict[str, list[tuple[float, float]]] = {module: [] for module in modules}
    for _ in range(runs):
        for module in modules:
            out = subprocess.run(
                [sys.executable, "-c", _IMPORT_PROBE.format(module=module)],
                cwd=REPO,
                capture_output=True,
                text=True,
                check=True,
            )
            wall, cpu = out.stdout.split()
            times[module].append((float(wall), float(cpu)))
    return times


def run(runs: int, servers: int) -> dict[str, Any]:
    results: dict[str, Any] = {"imports": {}, "servers": {}}
    # The yardstick: functions_framework's own import, measured in the same
    # rounds; a function's import over it is a ratio the machine's load
    # mostly cancels out of (BENCHMARKS.md: 0.47 s on a quiet machine).
    modules = {f.entry_point: f"spotline.functions.handlers.{f.entry_point}" for f in FUNCTIONS}
    modules[SOURCE] = SOURCE_MODULE
    times = import_times(["functions_framework", *modules.values()], runs)
    baseline = statistics.median(wall for wall, _ in times["functions_framework"])
    results["functions_framework_import_s"] = round(baseline, 3)
    # The same in CPU seconds: what the import computes, which waiting for a
    # core on a loaded machine does not add to; steadier than the wall ratio.
    baseline_cpu = statistics.median(cpu for _, cpu in times["functions_framework"])
    results["functions_framework_import_cpu_s"] = round(baseline_cpu, 3)
    for name, module in modules.items():
        wall = statistics.median(w for w, _ in times[module])
        cpu = statistics.median(c for _, c in times[module])
        results["imports"][name] = {
            "median_s": round(wall, 3),
            "max_s": round(max(w for w, _ in times[module]), 3),
            "cpu_s": round(cpu, 3),
            "vs_functions_framework": round(wall / baseline, 2),
            "at_quiet_s": round(wall / baseline * QUIET_FRAMEWORK_S, 2),
            "at_quiet_by_cpu_s": round(cpu / baseline_cpu * QUIET_FRAMEWORK_S, 2),
        }
    with (
        firestore_emulator() as firestore,
        pubsub_emulator() as pubsub,
        LocalCloud(PROJECT, RecordLauncher(), quota_limits=ROOMY) as cloud,
        webhook_receiver() as (webhook_url, webhook_got),
    ):
        settings = Settings(
            project=PROJECT,
            zones=ZONES,
            compute_endpoint=cloud.endpoint,
            storage_root="memory://bench-coldstart",
            webhook_allowed_networks=("127.0.0.0/8",),  # the receiver is on loopback
        )
        env = {
            **os.environ,
            **settings.to_env(),
            "PYTHONPATH": str(REPO),
            "FIRESTORE_EMULATOR_HOST": firestore,
            "PUBSUB_EMULATOR_HOST": pubsub,
            "GOOGLE_CLOUD_PROJECT": PROJECT,
        }
        # The jobs are made as the functions would: the same settings and clients.
        world = World(Deps(settings), cloud, webhook_url, webhook_got)
        for function in FUNCTIONS:
            rows = [
                fresh_server(function.entry_point, function.topic, env, world)
                for _ in range(servers)
            ]
            median = {
                key: round(statistics.median(row[key] for row in rows), 3)
                for key in ("ready_s", "first_s", "first_cpu_s", "second_s", "second_cpu_s")
            }
            results["servers"][function.entry_point] = median | {
                "first_imports_s": round(
                    statistics.median(r["first_imports"]["s"] for r in rows), 3
                ),
                "second_imports_s": round(
                    statistics.median(r["second_imports"]["s"] for r in rows), 3
                ),
                "first_biggest_imports": rows[0]["first_imports"]["biggest"],
                "statuses": sorted({row["status"] for row in rows}),
            }
    return results


def show(results: dict[str, Any]) -> None:
    print(
        f"cold start, medians (import target < {IMPORT_TARGET_S} s on a quiet machine, where "
        f"functions_framework's import takes {QUIET_FRAMEWORK_S} s; here now "
        f"{results['functions_framework_import_s']:.3f} s, "
        f"{results['functions_framework_import_cpu_s']:.3f} s of CPU)"
    )
    print(
        "  import: wall s, and its CPU s; /ff: the wall over functions_framework's; quiet~: the\n"
        "  CPU over functions_framework's, times 0.47 s. A fresh server: ready (started to\n"
        "  answering), its 1st request, the imports in it and the server's CPU s in it; the 2nd."
    )
    header = ("import", "cpu", "/ff", "quiet~", "ready", "1st req", "imports", "req cpu", "2nd req")
    print(f"  {'function':<18}" + "".join(f"{h:>9}" for h in header))
    for name, imported in results["imports"].items():
        flag = "" if imported["at_quiet_by_cpu_s"] < IMPORT_TARGET_S else "  OVER TARGET"
        row = (
            f"  {name:<18}{imported['median_s']:>9.3f}{imported['cpu_s']:>9.3f}"
            f"{imported['vs_functions_framework']:>9.2f}{imported['at_quiet_by_cpu_s']:>9.2f}"
        )
        server = results["servers"].get(name)
        if server is not None:
            row += (
                f"{server['ready_s']:>9.2f}{server['first_s']:>9.2f}"
                f"{server['first_imports_s']:>9.2f}{server['first_cpu_s']:>9.2f}"
                f"{server['second_s']:>9.3f}"
            )
        print(row + flag)
    print("  the first request's biggest imports (s, each with what it pulled in):")
    for name, server in results["servers"].items():
        biggest = ", ".join(f"{m} {s:.2f}" for m, s in server["first_biggest_imports"].items())
        print(f"    {name}: {biggest}")


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
