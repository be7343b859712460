"""Two and three real JAX processes on loopback, started with the
variables spotline gives a ``jax`` gang (``cluster_env``), run
examples/operators/jax_resume.py: ``jax.distributed`` joins them at the
coordinator, each step's gradient is averaged across them by XLA's CPU
collectives, and a notice (SIGTERM) to one stops them all at one step,
process 0 saving. Started again on another port, as a regrouped gang is,
they resume from the save and end with the parameters of a run never
stopped."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spotline.shared.contract.cluster import cluster_env
from tests.doc_examples import blocks
from tests.framework_required import require_framework

pytestmark = pytest.mark.frameworks
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "operators" / "jax_resume.py"
EPOCHS = 20  # of 10 steps each: long enough at 0.1 s a step for a notice to land mid-run


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_gang(
    tmp_path: Path, step_time_s: float, epochs: int = EPOCHS, nodes: int = 2
) -> list[subprocess.Popen[str]]:
    """Every process of a ``nodes``-node ``jax`` gang on this host, on a
    fresh port, each with a checkpoint folder of its own: only process 0's
    holds the save, as on a node that joined a gang whose save it never got."""
    port = free_port()
    hosts = ["127.0.0.1"] * nodes
    base = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SPOTLINE_EPOCHS": str(epochs),
        "SPOTLINE_HYPERPARAMETERS": json.dumps({"step_time_s": step_time_s}),
    }
    return [
        subprocess.Popen(
            [sys.executable, str(SCRIPT)],
            env=base
            | cluster_env("jax", hosts, rank, port)
            | {
                "SPOTLINE_CHECKPOINT_DIR": str(tmp_path / f"checkpoints-{rank}"),
                "SPOTLINE_EVENTS": str(tmp_path / f"events-{rank}.jsonl"),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(nodes)
    ]


def finish(gang: list[subprocess.Popen[str]]) -> tuple[list[int], list[str]]:
    outputs = [process.communicate(timeout=180)[0] for process in gang]
    return [process.returncode for process in gang], outputs


def trained_params(output: str, process: int, epochs: int = EPOCHS, nodes: int = 2) -> str:
    """The digest of the parameters ``process`` ended with, having trained every step."""
    trained = rf"jax process {process} of {nodes} trained {epochs * 10} steps params=(\w+)"
    found = re.search(trained, output)
    assert found, output[-3000:]
    return found.group(1)


def events(tmp_path: Path, rank: int) -> list[dict]:
    path = tmp_path / f"events-{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("nodes", [2, 3])
def test_a_notice_to_one_jax_process_stops_all_at_one_step_and_the_restart_resumes_exactly(
    tmp_path: Path, nodes: int
) -> None:
    """The notice reaches process 1 only (of 3: the middle node, neither the
    coordinator nor the last)."""
    require_framework("jax", "the JAX gang's stop and resume", "jax")
    codes, outputs = finish(start_gang(tmp_path / "straight", step_time_s=0, nodes=nodes))
    assert codes == [0] * nodes, outputs
    straight = {trained_params(output, rank, nodes=nodes) for rank, output in enumerate(outputs)}
    assert len(straight) == 1  # every process holds the same replicated parameters

    gang = start_gang(tmp_path, step_time_s=0.1, nodes=nodes)
    deadline = time.monotonic() + 120
    while not any(e.get("type") == "epoch" for e in events(tmp_path, 0)):
        assert time.monotonic() < deadline and gang[0].poll() is None, "no epoch reported"
        time.sleep(0.1)
    gang[1].send_signal(signal.SIGTERM)
    codes, outputs = finish(gang)

    assert codes == [143] * nodes, outputs
    stops = [re.findall(r"process \d: stopping after step (\d+)", output) for output in outputs]
    assert all(stop == stops[0] for stop in stops) and len(stops[0]) == 1, outputs
    stopped_at = int(stops[0][0])
    assert 10 <= stopped_at < EPOCHS * 10
    saves = [e for e in events(tmp_path, 0) if e.get("type") == "checkpoint"]
    assert [(e["step"], e["reason"]) for e in saves] == [(stopped_at, "sigterm")]
    for rank in range(1, nodes):
        assert events(tmp_path, rank) == []  # only process 0 saves and reports

    codes, outputs = finish(start_gang(tmp_path, step_time_s=0, nodes=nodes))
    assert codes == [0] * nodes, outputs
    resumed = [e["step"] for e in events(tmp_path, 0) if e.get("type") == "resumed"]
    assert resumed == [stopped_at]
    resumed_params = {
        trained_params(output, rank, nodes=nodes) for rank, output in enumerate(outputs)
    }
    assert resumed_params == straight


def test_the_docs_show_the_examples_own_initialize() -> None:
    [shown] = blocks("docs/gang-replacement.md", "### JAX", "python")
    assert shown.strip().replace("\n", "\n    ") in SCRIPT.read_text()
