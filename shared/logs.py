"""Structured log lines: one JSON object per line on standard output.

Cloud Functions and the VM's logging agent turn such lines into Cloud Logging
entries with their severity and fields; locally they stay greppable.

A VM's agent labels every line it writes while it runs a job with that job,
its attempt and the node's rank (``labelled``): Cloud Logging finds an
attempt's lines by those fields (``jsonPayload.job_id``...), its own lines and
the trainer's alike, on every node of a gang.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

_labels: dict[str, Any] = {}


def labelled(**labels: Any) -> None:
    """Put these fields on every line from now on, in place of the ones set
    before (the agent runs one job at a time; a cooling VM relabels for the
    next)."""
    _labels.clear()
    _labels.update(labels)


def emit(severity: str, message: str, **fields: Any) -> None:
    record = {"severity": severity, "message": message, **_labels, **fields}
    record.setdefault("time", datetime.now(UTC).isoformat())
    sys.stdout.write(json.dumps(record, default=str) + "\n")
    sys.stdout.flush()


def info(message: str, **fields: Any) -> None:
    emit("INFO", message, **fields)


def warning(message: str, **fields: Any) -> None:
    emit("WARNING", message, **fields)


def error(message: str, **fields: Any) -> None:
    emit("ERROR", message, **fields)
