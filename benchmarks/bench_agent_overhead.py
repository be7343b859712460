"""The agent's overhead on training step time (target: under 1 %).

The digits trainer runs the same epochs alone, as a plain process, and under
the real agent (output pump, report follower, heartbeats, preemption watch),
alternating, so that background load hits both. Each epoch's pure training
time is what the trainer prints itself; the medians are compared.

Two settings: "agent only" is what a VM pays: the agent with its own metadata
server, publishing to a Pub/Sub emulator nobody consumes. The emulator stands
in for Google's servers, which are not on the VM's cores: it runs at the lowest
priority, and its CPU time is printed, since on a busy machine the work it
takes from the trainer's neighbours still lands on the trainer. That setting
also prints the CPU time the agent's process itself used while its trainer
ran: unlike the step times, no neighbour's load moves it. "whole stack" also
runs the functions and emulators that handle its events on the same two
cores, which on Compute Engine run elsewhere (Cloud Functions).

Each round runs the trainer alone and under the agent, in turns (the order
swaps every round); the overhead is given from the medians of all epochs and as
the median of the rounds' own ratios, which a load that drifts between rounds
moves less. Prints numbers; asserts nothing.
Run: .venv/bin/python benchmarks/bench_agent_overhead.py [--epochs 30] [--rounds 3] [--no-stack]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from spotline.infra.cli.demo import wait_for_job  # noqa: E402
from spotline.infra.localstack.stack import LocalStack, StackOptions  # noqa: E402
from spotline.shared.adapters.firestore_store import FirestoreStore  # noqa: E402
from spotline.shared.adapters.pubsub_bus import PubsubBus  # noqa: E402
from spotline.shared.domain.lifecycle import job_id_for  # noqa: E402
from spotline.shared.domain.spec import parse_spec  # noqa: E402

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
        "SPOTLINE_CHECKPOINT_URL": str(tmp / f"alone-{run}"),
        "SPOTLINE_EVENTS": str(tmp / f"alone-{run}.jsonl"),
        "SPOTLINE_EPOCHS": str(epochs),
        "SPOTLINE_BATCH_SIZE": "8",
    }
    out = subprocess.run(
        [sys.executable, "-m", "spotline.vm_image.trainers.digits_mlp"],
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
    job_id = job_id_for(parse_spec(data), PubsubBus(stack.options.project).publish("submit", data))
    job = wait_for_job(FirestoreStore(stack.options.project), job_id, 600, echo=False)
    log = Path(stack.workdir, "vms", f"{job.instance}.log").read_text()
    return epoch_times(messages(log))


def agent_only(tmp: Path, pubsub_host: str, epochs: int, run: int) -> tuple[list[float], float]:
    """The real agent on a "VM" of its own: a metadata server, no functions.
    Returns the epoch times and the agent's own CPU seconds while its trainer ran."""
    from spotline.infra.localcloud.metadata_server import Identity, MetadataServer
    from spotline.shared.contract.assignment import Assignment
    from spotline.shared.domain.spec import JobSpec
    from spotline.shared.domain.vms import JOB_METADATA_KEY

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
    identity = Identity(f"bench-{run}", "1", "us-central1-a", "e2-standard-4", "bench", "1")
    server = MetadataServer(identity, {JOB_METADATA_KEY: assignment.model_dump_json()})
    server.start()
    log_path = tmp / f"agent-{run}.log"
    try:
        env = {
            **os.environ,
            "GCE_METADATA_HOST": server.host,
            "PUBSUB_EMULATOR_HOST": pubsub_host,
            "SPOTLINE_WORKDIR": str(tmp / f"vm-{run}"),
        }
        with open(log_path, "w") as log:
            agent = subprocess.Popen(
                [sys.executable, "-m", "spotline.vm_image.agent"],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            cpu = _cpu_while_training(agent.pid)
            if agent.wait() != 0:
                raise RuntimeError(f"the agent failed: see {log_path}")
    finally:
        server.close()
    return epoch_times(messages(log_path.read_text())), cpu


def _cpu_while_training(pid: int) -> float:
    """CPU seconds that process ``pid`` (all its threads, not its children)
    uses while its first child, the trainer, runs."""
    while not (children := Path(f"/proc/{pid}/task/{pid}/children").read_text().split()):
        time.sleep(0.01)  # the agent is still starting: imports, metadata, first events
    trainer = os.pidfd_open(int(children[0]))
    try:
        before = _cpu_seconds(pid)
        select.select([trainer], [], [])  # readable once the trainer has exited
        return _cpu_seconds(pid) - before
    finally:
        os.close(trainer)


def _group_cpu_seconds(pgid: int) -> float:
    """CPU seconds used so far by the live processes of process group ``pgid``."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            if int(fields[2]) == pgid:
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _cpu_seconds(pid: int) -> float:
    # utime and stime, the 14th and 15th fields of /proc/PID/stat, in clock ticks.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(label: str, rounds: list[tuple[list[float], list[float]]]) -> None:
    """Print the medians of every round's epochs and the median of the rounds' ratios."""
    solo = [seconds for alone_times, _ in rounds for seconds in alone_times]
    other = [seconds for _, agent_times in rounds for seconds in agent_times]
    a, b = statistics.median(solo), statistics.median(other)
    ratios = [statistics.median(mine) / statistics.median(theirs) for theirs, mine in rounds]
    print(
        f"{label}: epoch train time (180 steps, batch 8), medians of "
        f"{len(solo)} and {len(other)} epochs ({len(rounds)} rounds)"
    )
    print(f"  trainer alone        {a * 1000:8.2f} ms")
    print(f"  under the agent      {b * 1000:8.2f} ms")
    print(f"  overhead             {100 * (b - a) / a:+8.2f} %  (target: under 1 %)")
    print(
        f"  rounds' own ratios   {100 * (statistics.median(ratios) - 1):+8.2f} % median "
        f"({', '.join(f'{100 * (r - 1):+.1f}' for r in ratios)})"
    )


def in_turns(
    run: int, solo: Callable[[], list[float]], agent: Callable[[], list[float]]
) -> tuple[list[float], list[float]]:
    """One round: both runs, the first epoch of each (warm-up) dropped; the
    order swaps every round."""
    if run % 2:
        agent_times = agent()[1:]
        return solo()[1:], agent_times
    solo_times = solo()[1:]
    return solo_times, agent()[1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-stack", action="store_true", help="the agent-only setting alone")
    args = parser.parse_args()
    from spotline.infra.localstack.emulators import start_pubsub

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        pubsub = start_pubsub(tmp / "logs", "bench")
        try:
            pubsub.wait_ready()
            # Every thread of the emulator's process group, java included.
            os.setpriority(os.PRIO_PGRP, pubsub.process.pid, 19)
            from google.cloud.pubsub_v1 import PublisherClient

            os.environ["PUBSUB_EMULATOR_HOST"] = pubsub.host
            publisher = PublisherClient()
            for topic in ("spotline-vm-booted", "spotline-epoch-done", "spotline-job-finished"):
                publisher.create_topic(name=publisher.topic_path("bench", topic))
            cpu: list[float] = []

            emulator_cpu = 0.0

            def measured_agent(run: int) -> list[float]:
                nonlocal emulator_cpu
                before = _group_cpu_seconds(pubsub.process.pid)
                times, seconds = agent_only(tmp, pubsub.host, args.epochs, run)
                emulator_cpu += _group_cpu_seconds(pubsub.process.pid) - before
                cpu.append(seconds)
                return times

            rounds = [
                in_turns(run, partial(alone, tmp, args.epochs, run), partial(measured_agent, run))
                for run in range(args.rounds)
            ]
            report("agent only (what a VM pays)", rounds)
            epochs = args.rounds * args.epochs
            per_epoch = sum(cpu) / epochs
            epoch = statistics.median(seconds for _, times in rounds for seconds in times)
            print(
                f"  agent's own CPU      {per_epoch * 1000:8.2f} ms an epoch while its trainer ran"
                f" ({100 * per_epoch / epoch:.1f} % of an epoch's train time; /proc, 10 ms ticks)"
            )
            print(
                f"  the emulator's CPU   {emulator_cpu * 1000 / epochs:8.2f} ms an epoch"
                " (during the agent's runs; on a VM Google's servers do this work elsewhere)"
            )
        finally:
            pubsub.stop()
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        if args.no_stack:
            return
        stack = LocalStack(tmp / "stack", StackOptions(tick_s=30.0, heartbeat_s=5.0))
        with stack:
            rounds = [
                in_turns(
                    run,
                    partial(alone, tmp, args.epochs, 100 + run),
                    partial(under_agent, stack, args.epochs, run),
                )
                for run in range(args.rounds)
            ]
        report("whole local stack on the same 2 cores", rounds)


if __name__ == "__main__":
    main()
