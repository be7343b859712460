"""Run a framework script as its own process, as the agent does, and stop it
with SIGTERM at a chosen step (the preemption notice)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SCRIPT_TIMEOUT_S = 300


def script_env(folder: Path, integrated: bool, step_sleep_s: float = 0.0) -> dict[str, str]:
    """The variables the agent gives a trainer, in ``folder``, plus the probe's."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("SPOTLINE_")}
    return {
        **env,
        "SPOTLINE_CHECKPOINT_DIR": str(folder / "checkpoints"),
        "SPOTLINE_OUTPUT_DIR": str(folder / "outputs"),
        "SPOTLINE_EVENTS": str(folder / "events.jsonl"),
        "SPOTLINE_INTEGRATION": "1" if integrated else "0",
        "STEPS_FILE": str(folder / "steps.txt"),
        "STEP_SLEEP_S": str(step_sleep_s),
        # Nothing from the Hugging Face Hub; one thread (the CPUs are shared).
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }


def run(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The script to its end."""
    return subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        check=False,
    )


def run_until_sigterm(
    script: Path, env: dict[str, str], at_step: int
) -> subprocess.CompletedProcess[str]:
    """The script, sent SIGTERM once its probe has recorded ``at_step``."""
    steps = Path(env["STEPS_FILE"])
    with subprocess.Popen(
        [sys.executable, str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        deadline = time.monotonic() + SCRIPT_TIMEOUT_S
        while not (steps_done(steps) and steps_done(steps)[-1] >= at_step):
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read() if process.stdout else ""
                raise AssertionError(f"never reached step {at_step}:\n{output[-3000:]}")
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=SCRIPT_TIMEOUT_S)
        return subprocess.CompletedProcess(process.args, process.returncode, output, "")


def steps_done(steps: Path) -> list[int]:
    """Every step the probe recorded, in order, over all runs."""
    if not steps.exists():
        return []
    return [int(line) for line in steps.read_text().split()]


def events(folder: Path) -> list[dict[str, Any]]:
    path = folder / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
