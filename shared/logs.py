"""Structured log lines: one JSON object per line on standard output.

Cloud Functions and the VM's logging agent turn such lines into Cloud Logging
entries with their severity and fields; locally they stay greppable.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any


def emit(severity: str, message: str, **fields: Any) -> None:
    record = {"severity": severity, "message": message, **fields}
    record.setdefault("time", datetime.now(UTC).isoformat())
    sys.stdout.write(json.dumps(record, default=str) + "\n")
    sys.stdout.flush()


def info(message: str, **fields: Any) -> None:
    emit("INFO", message, **fields)


def warning(message: str, **fields: Any) -> None:
    emit("WARNING", message, **fields)


def error(message: str, **fields: Any) -> None:
    emit("ERROR", message, **fields)
