"""The digits trainer on two ranks with the gloo backend over loopback, as two
nodes of a job run it: both finish with the same weights; rank 0 alone reports;
a notice on rank 1 alone stops both at one step, and rank 0 saves it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from spotline.shared.contract.cluster import master_port

pytestmark = pytest.mark.frameworks


def start_ranks(
    tmp_path: Path, run: str, world: int = 2, **env: str
) -> list[subprocess.Popen[str]]:
    """``world`` ranks of the digits trainer, as the nodes' agents start them."""
    # As the agent does: below the ephemeral range, where a port freed by
    # free_port() may be taken by another program before rank 0 binds it.
    port = master_port(uuid.uuid4().hex, 1)
    procs = []
    for rank in range(world):
        rank_env = {
            **os.environ,
            "SPOTLINE_CHECKPOINT_URL": str(tmp_path / "ckpt"),
            "SPOTLINE_EVENTS": str(tmp_path / f"events-{run}-{rank}.jsonl"),
            "SPOTLINE_EPOCHS": "2",
            "SPOTLINE_SEED": "4",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(world),
            "RANK": str(rank),
            **env,
        }
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "spotline.vm_image.trainers.digits_mlp"], env=rank_env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))  # fmt: skip
    return procs


def finish(procs: list[subprocess.Popen[str]]) -> list[str]:
    try:
        return [proc.communicate(timeout=90)[0] for proc in procs]
    finally:
        for proc in procs:  # never leave a rank behind, even on a timeout
            proc.kill()
            proc.wait()


def final_digests(outputs: list[str]) -> list[str]:
    found = [re.search(r"final weights sha256=(\w+)", out) for out in outputs]
    assert all(found), outputs
    return [match.group(1) for match in found if match]


def reports(tmp_path: Path, run: str, rank: int) -> list[dict[str, Any]]:
    path = tmp_path / f"events-{run}-{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_two_ranks_train_to_identical_weights(tmp_path: Path) -> None:
    procs = start_ranks(tmp_path, "straight")
    outputs = finish(procs)

    assert [proc.returncode for proc in procs] == [0, 0], outputs
    digests = final_digests(outputs)
    assert digests[0] == digests[1]
    assert [r["epoch"] for r in reports(tmp_path, "straight", 0) if r["type"] == "epoch"] == [1, 2]
    assert reports(tmp_path, "straight", 1) == []


@pytest.mark.parametrize("world", [2, 3])
def test_a_notice_on_rank_1_alone_stops_both_at_one_step_saved_by_rank_0(
    tmp_path: Path, world: int
) -> None:
    """A gang's node 1 gets the Spot notice, node 0 none: the ranks agree on
    the step to stop at (a flag in a collective each step), rank 0 saves it
    and says why, all exit 143; resumed, the run ends with the weights of a
    run never stopped: no step lost. Three ranks too, whose gradients' sum
    depends on its order: the resumed run sums each step as the straight one
    did."""
    straight = final_digests(finish(start_ranks(tmp_path / "straight", "straight", world)))
    slow = json.dumps({"step_time_s": 0.05})
    procs = start_ranks(tmp_path, "stopped", world, SPOTLINE_HYPERPARAMETERS=slow)
    deadline = time.monotonic() + 60
    while not any(r["type"] == "epoch" for r in reports(tmp_path, "stopped", 0)):
        assert time.monotonic() < deadline and procs[0].poll() is None
        time.sleep(0.05)
    time.sleep(0.3)  # into the second epoch
    procs[1].send_signal(signal.SIGTERM)
    outputs = finish(procs)

    assert [proc.returncode for proc in procs] == [143] * world, outputs
    saved = [r for r in reports(tmp_path, "stopped", 0) if r["type"] == "checkpoint"]
    assert len(saved) == 1 and saved[0]["reason"] == "peer", saved
    steps_per_epoch = 45  # 1438 training samples, batch 32
    assert saved[0]["step"] % steps_per_epoch != 0  # the notice's save, mid-epoch
    stops = [re.findall(r"stopped at step (\d+)", out) for out in outputs]
    assert stops == [[str(saved[0]["step"])]] * world, outputs

    resumed = start_ranks(tmp_path, "resumed", world)
    outputs = finish(resumed)
    assert [proc.returncode for proc in resumed] == [0] * world, outputs
    assert f"resumed_from_step={saved[0]['step']}" in outputs[0]
    assert final_digests(outputs) == straight
