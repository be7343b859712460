"""The agent's overhead on training step time (target: under 1 %).

The digits trainer runs the same epochs alone, as a plain process, and under
the real agent (output pump, report follower, heartbeats, preemption watch),
alternating, so that background load hits both. Each epoch's pure training
time is what the trainer prints itself; the medians are compared.

Two settings: "agent only" is what a VM pays: the agent with its own metadata
server, publishing to a Pub/Sub emulator nobody consumes. "whole stack" also
runs the functions and emulators that handle its events on the same two
cores, which on Compute Engine run elsewhere (Cloud Functions).
Prints numbers; asserts nothing.
Run: .venv/bin/python benchmarks/bench_agent_overhead.py [--epochs 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.demo import wait_for_job  # noqa: E402
from infra.local_stack import LocalStack, StackOptions  # noqa: E402
from shared.bus import Bus  # noqa: E402
from shared.lifecycle import job_id_for  # noqa: E402
from shared.spec import parse_spec  # noqa: E402
from shared.store import Store  # noqa: E402

EPOCH_LINE = re.compile(r"epoch \d+/\d+ step \d+ .*\((\d+\.\d+) ms train")


def epoch_times(text: str) -> list[float]:
    """Each epoch's training time in seconds, as the trainer prints it (to 0.01 ms)."""
    return [float(m.group(1)) / 1000 for m in EPOCH_LINE.finditer(text)]


def messages(text: str) -> str:
    """The message of each JSON log line (the agent's output), other lines as they are."""
    lines = []
    for line in text.splitlines():
        try:
            lines.append(str(json.loads(line).get("message", "")))
        except (json.JSONDecodeError, AttributeError):
            lines.append(line)
    return "\n".join(lines)


def alone(tmp: Path, epochs: int, run: int) -> list[float]:
    env = {
        **os.environ,
        "SPOTLINE_CHECKPOINT_DIR": str(tmp / f"alone-{run}"),
        "SPOTLINE_EVENTS": str(tmp / f"alone-{run}.jsonl"),
        "SPOTLINE_EPOCHS": str(epochs),
        "SPOTLINE_BATCH_SIZE": "8",
    }
    out = subprocess.run(
        [sys.executable, "-m", "vm_image.trainers.digits_mlp"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return epoch_times(out.stdout)


def under_agent(stack: LocalStack, epochs: int, run: int) -> list[float]:
    spec = {
        "user": "bench",
        "machine_ids": ["e2-standard-4"],
        "trainer": "digits_mlp",
        "epochs": epochs,
        "batch_size": 8,
        "description": f"overhead {run}",
    }
    data = json.dumps(spec).encode()
    job_id = job_id_for(parse_spec(data), Bus(stack.options.project).publish("submit", data))
    job = wait_for_job(Store(stack.options.project), job_id, 600, echo=False)
    log = Path(stack.workdir, "vms", f"{job.instance}.log").read_text()
    return epoch_times(messages(log))


def agent_only(tmp: Path, pubsub_host: str, epochs: int, run: int) -> list[float]:
    """The real agent on a "VM" of its own: a metadata server, no functions."""
    from infra.metadata_server import Identity, MetadataServer
    from shared.assignment import Assignment
    from shared.compute.port import JOB_METADATA_KEY
    from shared.spec import JobSpec

    spec = JobSpec(
        user="bench",
        machine_ids=["e2-standard-4"],
        trainer="digits_mlp",
        epochs=epochs,
        batch_size=8,
    )
    assignment = Assignment(
        job_id=f"bench{run}",
        attempt=1,
        project="bench",
        spec=spec,
        checkpoint_dir=str(tmp / f"agent-{run}"),
        output_dir=str(tmp),
        heartbeat_s=5.0,
    )
    identity = Identity(f"bench-{run}", "1", "local-a", "e2-standard-4", "bench", "1")
    server = MetadataServer(identity, {JOB_METADATA_KEY: assignment.model_dump_json()})
    server.start()
    try:
        env = {
            **os.environ,
            "GCE_METADATA_HOST": server.host,
            "PUBSUB_EMULATOR_HOST": pubsub_host,
            "SPOTLINE_WORKDIR": str(tmp / f"vm-{run}"),
        }
        out = subprocess.run(
            [sys.executable, "-m", "vm_image.agent"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        server.close()
    return epoch_times(messages(out.stdout))


def report(label: str, solo: list[float], other: list[float]) -> None:
    a, b = statistics.median(solo), statistics.median(other)
    print(f"{label}: epoch train time (180 steps, batch 8), medians of {len(solo)} epochs each")
    print(f"  trainer alone        {a * 1000:8.1f} ms")
    print(f"  under the agent      {b * 1000:8.1f} ms")
    print(f"  overhead             {100 * (b - a) / a:+8.1f} %  (target: under 1 %)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from infra.emulators import start_pubsub

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        pubsub = start_pubsub(tmp / "logs", "bench")
        try:
            pubsub.wait_ready()
            from google.cloud.pubsub_v1 import PublisherClient

            os.environ["PUBSUB_EMULATOR_HOST"] = pubsub.host
            publisher = PublisherClient()
            for topic in ("spotline-vm-booted", "spotline-epoch-done", "spotline-job-finished"):
                publisher.create_topic(name=publisher.topic_path("bench", topic))
            solo: list[float] = []
            agent: list[float] = []
            for run in range(args.rounds):  # the first epoch of each run warms up
                solo += alone(tmp, args.epochs, run)[1:]
                agent += agent_only(tmp, pubsub.host, args.epochs, run)[1:]
            report("agent only (what a VM pays)", solo, agent)
        finally:
            pubsub.stop()
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        solo, agent = [], []
        stack = LocalStack(tmp / "stack", StackOptions(tick_s=30.0, heartbeat_s=5.0))
        with stack:
            for run in range(args.rounds):
                solo += alone(tmp, args.epochs, 100 + run)[1:]
                agent += under_agent(stack, args.epochs, run)[1:]
        report("whole local stack on the same 2 cores", solo, agent)


if __name__ == "__main__":
    main()
