"""A TensorFlow gang stops together and resumes: examples/operators/keras_multiworker_resume.py
as two real MultiWorkerMirroredStrategy workers on loopback, with the
TF_CONFIG spotline gives each node. One worker gets SIGTERM (a node's
notice): both stop after the same step, the chief saves it, both exit 143
(what the agent takes as "stopped with the gang"); started again on the
next generation's ports, both resume from that step and end with the
weights of a gang never stopped. Needs the ``tensorflow`` extra."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tensorflow_required import require_tensorflow

require_tensorflow("TENSORFLOW MULTI-WORKER TESTS")

from spotline.shared.contract.cluster import cluster_env  # noqa: E402
from spotline.shared.contract.ranks import EXIT_STOPPED  # noqa: E402

pytestmark = pytest.mark.frameworks

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "operators" / "keras_multiworker_resume.py"
EPOCHS, STEPS_PER_EPOCH = 4, 8  # the script's: 32 steps in all
RUN_S = 240.0  # TensorFlow's import and the gang's start take seconds each, more when loaded


def free_ports() -> int:
    """A port with the next one free too: TF_CONFIG gives worker i port + i."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        try:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port


def start_gang(root: Path, step_time_s: float = 0.3) -> list[subprocess.Popen[str]]:
    """Both workers of the gang, each with its node's folder under ``root``
    (``node<rank>``: its checkpoint folder and its events file), each step
    taking ``step_time_s`` more (so that a notice lands mid-run)."""
    port = free_ports()
    workers = []
    for rank in range(2):
        node = root / f"node{rank}"
        (node / "checkpoints").mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **cluster_env("tensorflow", ["127.0.0.1", "127.0.0.1"], rank, port),
            "PYTHONPATH": str(ROOT),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "SPOTLINE_EPOCHS": str(EPOCHS),
            "SPOTLINE_HYPERPARAMETERS": json.dumps({"step_time_s": step_time_s}),
            "SPOTLINE_CHECKPOINT_DIR": str(node / "checkpoints"),
            "SPOTLINE_EVENTS": str(node / "events.jsonl"),
        }
        workers.append(
            subprocess.Popen(
                [sys.executable, str(SCRIPT)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return workers


def finish(workers: list[subprocess.Popen[str]]) -> list[str]:
    """Each worker's output once it exited (killed past RUN_S)."""
    try:
        return [worker.communicate(timeout=RUN_S)[0] for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def events(root: Path, rank: int = 0) -> list[dict[str, object]]:
    path = root / f"node{rank}" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def final_weights(output: str) -> str:
    found = re.search(rf"trained {EPOCHS * STEPS_PER_EPOCH} steps weights=(\w+)", output)
    assert found, output[-3000:]
    return found.group(1)


def test_a_notice_on_one_worker_stops_the_gang_at_one_step_and_it_resumes_there(
    tmp_path: Path,
) -> None:
    straight = finish(start_gang(tmp_path / "straight", step_time_s=0))
    expected = {final_weights(output) for output in straight}
    assert len(expected) == 1, straight

    stopped = tmp_path / "stopped"
    workers = start_gang(stopped)
    deadline = time.monotonic() + RUN_S
    # Mid-run: after the chief reported the first epoch, before the last.
    while not any(event["type"] == "epoch" for event in events(stopped)):
        assert time.monotonic() < deadline and workers[0].poll() is None, finish(workers)
        time.sleep(0.2)
    workers[1].send_signal(signal.SIGTERM)
    outputs = finish(workers)

    assert [worker.returncode for worker in workers] == [EXIT_STOPPED, EXIT_STOPPED], outputs
    steps = {int(m) for out in outputs for m in re.findall(r"stopping after step (\d+)", out)}
    assert len(steps) == 1, outputs  # both workers stopped after the same step
    (step,) = steps
    assert STEPS_PER_EPOCH <= step < EPOCHS * STEPS_PER_EPOCH
    saved = [event for event in events(stopped) if event["type"] == "checkpoint"]
    assert [(event["step"], event["reason"]) for event in saved] == [(step, "sigterm")]
    assert (stopped / "node0" / "checkpoints" / "tf-state" / f"ckpt-{step}.index").exists()
    assert events(stopped, rank=1) == []  # only the chief reports

    # The regroup: the agent restores the job's checkpoint folder (the
    # chief's save) onto every node, and the gang starts on new ports.
    node1 = stopped / "node1" / "checkpoints"
    shutil.rmtree(node1)
    shutil.copytree(stopped / "node0" / "checkpoints", node1)
    (stopped / "node0" / "events.jsonl").unlink()
    workers = start_gang(stopped)
    outputs = finish(workers)

    assert [worker.returncode for worker in workers] == [0, 0], outputs
    for rank, output in enumerate(outputs):
        assert f"worker {rank} resumed at step {step}" in output, output[-3000:]
    assert {final_weights(output) for output in outputs} == expected
    resumed = [event for event in events(stopped) if event["type"] == "resumed"]
    assert [event["step"] for event in resumed] == [step]
