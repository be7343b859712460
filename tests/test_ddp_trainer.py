"""The digits trainer on two ranks with the gloo backend over loopback, as two
nodes of a job run it: both finish with the same weights; rank 0 alone reports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

from shared.contract.cluster import master_port


def test_two_ranks_train_to_identical_weights(tmp_path: Path) -> None:
    # As the agent does: below the ephemeral range, where a port freed by
    # free_port() may be taken by another program before rank 0 binds it.
    port = master_port(uuid.uuid4().hex, 1)
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "SPOTLINE_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
            "SPOTLINE_EVENTS": str(tmp_path / f"events-{rank}.jsonl"),
            "SPOTLINE_EPOCHS": "2",
            "SPOTLINE_SEED": "4",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": "2",
            "RANK": str(rank),
        }
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "vm_image.trainers.digits_mlp"], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))  # fmt: skip
    try:
        outputs = [proc.communicate(timeout=90)[0] for proc in procs]
    finally:
        for proc in procs:  # never leave a rank behind, even on a timeout
            proc.kill()
            proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    digests = [re.search(r"final weights sha256=(\w+)", out) for out in outputs]
    assert all(digests) and digests[0].group(1) == digests[1].group(1)  # type: ignore[union-attr]
    reports = [json.loads(line) for line in (tmp_path / "events-0.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in reports if r["type"] == "epoch"] == [1, 2]
    assert (
        not (tmp_path / "events-1.jsonl").exists() or not (tmp_path / "events-1.jsonl").read_text()
    )
