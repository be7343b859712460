"""The agent's view of a trainer process: its reports keep flowing while it
runs when relaying one of them fails (Pub/Sub out of reach for a while)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spotline.vm_image.agent.trainer_process import TAIL_CHARS, CannotStart, TrainerProcess

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


def _wait_within(trainer: TrainerProcess, timeout_s: float) -> int | None:
    """``trainer.wait()``, or None when it does not return in time (the
    trainer is then killed, so that a hang fails the test instead of hanging it)."""
    done: list[int] = []
    waiter = threading.Thread(target=lambda: done.append(trainer.wait()), daemon=True)
    waiter.start()
    waiter.join(timeout_s)
    if not done:
        trainer.process.kill()
        return None
    return done[0]


# Bytes that are not UTF-8, then far more output than a pipe holds (64 KiB),
# a long line without a newline among it, then exit 3.
UNDECODABLE = r"""
import sys
out = sys.stdout.buffer
out.write(b"caf\xe9 \xff\xfe not utf-8\n")
for n in range(20000):
    out.write(b"line %d of the noise\n" % n)
out.write(b"x" * 300_000)
out.write(b"\nlast words\n")
out.flush()
sys.exit(3)
"""


def test_output_that_is_not_utf8_neither_stops_the_copy_nor_fills_the_pipe(
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    command = [sys.executable, "-c", UNDECODABLE]
    trainer = TrainerProcess(command, {}, tmp_path, events, lambda record: None)

    assert _wait_within(trainer, 30) == 3
    tail = trainer.log_tail()
    assert tail.endswith("last words\n")
    assert len(tail) <= TAIL_CHARS
    log = (tmp_path / "trainer.log").read_text(encoding="utf-8")
    assert log.startswith("caf\ufffd \ufffd\ufffd not utf-8\n")
    assert "line 19999 of the noise" in log


@pytest.mark.parametrize(
    ("command", "env", "code", "names"),
    [
        (["no-such-trainer-binary"], {}, 127, "no-such-trainer-binary"),
        ([sys.executable, "-c", "print(1)\0"], {}, 126, "command argument 'print(1)\\x00'"),
        ([sys.executable, "-c", "print(1)"], {"A=B": "1"}, 126, "variable name 'A=B'"),
        ([sys.executable, "-c", "print(1)"], {"A\0": "1"}, 126, "variable name 'A\\x00'"),
        ([sys.executable, "-c", "print(1)"], {"A": "1\0"}, 126, "variable 'A' has a NUL"),
    ],
)
def test_a_trainer_that_cannot_start_says_why(
    tmp_path: Path, command: list[str], env: dict[str, str], code: int, names: str
) -> None:
    events = tmp_path / "events.jsonl"
    with pytest.raises(CannotStart) as raised:
        TrainerProcess(command, env, tmp_path, events, lambda record: None)
    assert raised.value.exit_code == code
    assert names in str(raised.value)


# A report line that is not UTF-8, then a good one.
BAD_REPORT = r"""
import json, sys
with open(sys.argv[1], "ab") as events:
    events.write(b'{"type": "epoch", "epoch": "\xff"}\n')
    events.write(json.dumps({"type": "epoch", "epoch": 2}).encode() + b"\n")
"""


def test_a_report_that_is_not_utf8_is_skipped(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    relayed: list[Any] = []
    command = [sys.executable, "-c", BAD_REPORT, str(events)]
    trainer = TrainerProcess(command, {}, tmp_path, events, lambda r: relayed.append(r["epoch"]))

    assert _wait_within(trainer, 30) == 0
    assert relayed[-1] == 2
