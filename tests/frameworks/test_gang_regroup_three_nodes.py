"""Three-node gangs of XGBoost and Ray whose middle node gets the notice,
with the real frameworks on loopback: every node stops with the gang (143),
node 0 saves, and (XGBoost) the gang regrouped on the next generation's
tracker port ends with the model a gang never stopped trains."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spotline.shared.contract.cluster import cluster_env, gang_port
from tests.framework_required import require_framework
from tests.frameworks.test_ray_launcher import free_port, group_alive, launch, read_into

pytestmark = pytest.mark.frameworks

ROOT = Path(__file__).resolve().parents[2]
XGBOOST = ROOT / "examples" / "operators" / "xgboost_resume.py"
NODES = 3
EPOCHS = 4  # of 10 rounds each


def start_xgboost(folder: Path, generation: int, slow: bool) -> list[subprocess.Popen[str]]:
    """The gang's three ranks of ``generation``, each with the env spotline
    gives its node (``cluster_env``: the tracker on node 0 at the
    generation's port), sharing node 0's checkpoint folder."""
    hosts = ["127.0.0.1"] * NODES
    port = gang_port(f"xgb-{folder.name}", 0, generation)
    hyper = '{"step_time_s": 0.5}' if slow else "{}"
    return [
        subprocess.Popen(
            [sys.executable, str(XGBOOST)],
            env={
                **os.environ,
                **cluster_env("xgboost", hosts, rank, port),
                "PYTHONPATH": str(ROOT),
                "SPOTLINE_EPOCHS": str(EPOCHS),
                "SPOTLINE_HYPERPARAMETERS": hyper,
                "SPOTLINE_CHECKPOINT_DIR": str(folder / "checkpoints"),
                "SPOTLINE_EVENTS": str(folder / f"events-{rank}.jsonl"),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(NODES)
    ]


def finish(ranks: list[subprocess.Popen[str]]) -> tuple[list[int | None], list[str]]:
    outputs = [rank.communicate(timeout=180)[0] for rank in ranks]
    return [rank.returncode for rank in ranks], outputs


def model_of(output: str) -> str:
    found = re.search(r"xgboost rank 0 trained (\d+) rounds model=(\w+)", output)
    assert found, output[-3000:]
    assert int(found.group(1)) == EPOCHS * 10
    return found.group(2)


def test_an_xgboost_gang_of_three_regroups_after_its_middle_nodes_notice(tmp_path: Path) -> None:
    require_framework("xgboost", "the 3-node XGBoost regroup", "xgboost")
    straight = tmp_path / "straight"
    codes, outputs = finish(start_xgboost(straight, 0, slow=False))
    assert codes == [0] * NODES, outputs
    never_stopped = model_of(outputs[0])
    stopped = tmp_path / "stopped"
    ranks = start_xgboost(stopped, 0, slow=True)
    events = stopped / "events-0.jsonl"
    deadline = time.monotonic() + 120
    while not (events.exists() and '"type":"epoch"' in events.read_text()):
        assert all(rank.poll() is None for rank in ranks), finish(ranks)
        assert time.monotonic() < deadline, "node 0 never reported an epoch"
        time.sleep(0.2)
    ranks[1].send_signal(signal.SIGTERM)  # the middle node's notice
    codes, outputs = finish(ranks)
    assert codes == [143] * NODES, outputs
    assert '"reason":"sigterm"' in events.read_text()  # node 0 saved where the gang stopped
    # The gang regrouped: generation 1's node list (the replacement at rank
    # 1), so node 0's tracker moves to that generation's port.
    codes, outputs = finish(start_xgboost(stopped, 1, slow=False))
    assert codes == [0] * NODES, outputs
    assert '"type":"resumed"' in events.read_text()
    assert model_of(outputs[0]) == never_stopped


def test_a_ray_workers_notice_stops_a_gang_of_three() -> None:
    """The middle node of three (a worker) gets the notice: the head's
    driver saves and every node, the other worker too, exits 143."""
    require_framework("ray", "the 3-node Ray gang's stop", "ray")
    port = free_port()
    nodes = [launch(port, rank, NODES) for rank in range(NODES)]
    outs: list[list[str]] = [[] for _ in nodes]
    readers = [read_into(node, out) for node, out in zip(nodes, outs, strict=True)]
    try:
        deadline = time.monotonic() + 300
        while not any(f"driver joined {NODES} node" in line for line in list(outs[0])):
            assert all(node.poll() is None for node in nodes), "".join(outs[0][-40:])
            assert time.monotonic() < deadline, "the driver never ran:\n" + "".join(outs[0][-40:])
            time.sleep(0.5)
        nodes[1].send_signal(signal.SIGTERM)  # the middle node's VM gets the notice
        codes = [node.wait(timeout=150) for node in nodes]
        for reader in readers:
            reader.join(timeout=30)
        assert codes == [143] * NODES, ["".join(out[-30:]) for out in outs]
        assert "driver checkpointing on the notice" in "".join(outs[0])
        assert "the Ray head was told, and answered 'stopping'" in "".join(outs[1])
        assert "this node stops with it" in "".join(outs[2])
    finally:
        for node in nodes:
            if group_alive(node.pid):
                os.killpg(node.pid, signal.SIGKILL)
