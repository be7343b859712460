"""The agent's view of a trainer process: its reports keep flowing while it
runs when relaying one of them fails (Pub/Sub out of reach for a while)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from vm_image.agent.trainer_process import TrainerProcess

# Reports epochs 1 and 2, then waits for the test to let it finish.
TRAINER = """
import json, os, sys, time
events_path, go = sys.argv[1], sys.argv[2]
with open(events_path, "a") as events:
    for epoch in (1, 2):
        events.write(json.dumps({"type": "epoch", "epoch": epoch}) + "\\n")
        events.flush()
deadline = time.time() + 10
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.05)
"""


def test_a_failed_relay_does_not_stop_the_reports(tmp_path: Path) -> None:
    events, go = tmp_path / "events.jsonl", tmp_path / "go"
    relayed: list[Any] = []

    def relay(record: dict[str, Any]) -> None:
        if record["epoch"] == 1:
            raise OSError("Pub/Sub unreachable")
        relayed.append(record["epoch"])

    command = [sys.executable, "-c", TRAINER, str(events), str(go)]
    trainer = TrainerProcess(command, {}, tmp_path, events, relay)
    deadline = time.monotonic() + 5
    while not relayed and time.monotonic() < deadline:
        time.sleep(0.05)
    seen_while_running = list(relayed) if trainer.process.poll() is None else None
    go.touch()

    assert trainer.wait() == 0
    assert seen_while_running == [2]  # relayed while it ran, not only at its exit
