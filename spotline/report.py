"""How a trainer tells the agent about its progress: JSON lines in a file.

The agent sets ``SPOTLINE_EVENTS`` to a file path and tails it; any program in
any language can append a line, so a plain command can report epochs too::

    echo '{"type": "epoch", "epoch": 3, "epochs": 10, "step": 300,
           "metrics": {"loss": 0.12}}' >> "$SPOTLINE_EVENTS"

Without the variable (running outside spotline) lines go to standard output.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

EVENTS_ENV = "SPOTLINE_EVENTS"


def report_epoch(
    epoch: int,
    epochs: int,
    step: int,
    metrics: dict[str, float],
    checkpoint_uri: str | None = None,
) -> None:
    """Record that ``epoch`` (1-based) finished after ``step`` optimizer steps."""
    _write(
        {
            "type": "epoch",
            "epoch": epoch,
            "epochs": epochs,
            "step": step,
            "metrics": {name: float(value) for name, value in metrics.items()},
            "checkpoint_uri": checkpoint_uri,
            "time": time.time(),
        }
    )


def report_checkpoint(step: int, uri: str, reason: str) -> None:
    """Record that the state after ``step`` optimizer steps is saved at ``uri``.

    ``reason`` says why it was saved outside the epoch rhythm, e.g. ``"sigterm"``
    (about to exit) or ``"sigusr1"`` (asked for one, training goes on).
    """
    _write(
        {
            "type": "checkpoint",
            "step": step,
            "uri": uri,
            "reason": reason,
            "time": time.time(),
        }
    )


def report_resumed(step: int, checkpoint_uri: str) -> None:
    """Record that this attempt picked up from ``step`` of an earlier one."""
    _write({"type": "resumed", "step": step, "checkpoint_uri": checkpoint_uri, "time": time.time()})


def _write(record: dict[str, Any]) -> None:
    line = json.dumps(record, separators=(",", ":")) + "\n"
    path = os.environ.get(EVENTS_ENV)
    if not path:
        sys.stdout.write(line)
        return
    # One write() of a short line in append mode lands whole: the agent never
    # reads half a record.
    with open(path, "a", encoding="utf-8") as events:
        events.write(line)
