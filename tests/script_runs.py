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

import pytest

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


# What a framework's notice tests check of the run after a SIGTERM, whatever
# the framework (Lightning, Hugging Face): its script trains two epochs of
# ``steps // 2`` steps and saves every ``save_steps``.


def assert_resumed_redoing_none(
    script: Path, folder: Path, stopped_at: int, steps: int, metric: str
) -> None:
    """Run ``script`` again after a notice saved at ``stopped_at``: it ends,
    redoes no step, says it resumed there, and reports each epoch once, the
    last with ``metric``."""
    resumed = run(script, script_env(folder, integrated=True))

    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert steps_done(folder / "steps.txt") == list(range(1, steps + 1))  # none twice
    assert [e["step"] for e in events(folder) if e["type"] == "resumed"] == [stopped_at]
    reports = [e for e in events(folder) if e["type"] == "epoch"]
    epochs = [(e["epoch"], e["epochs"], e["step"]) for e in reports]
    assert epochs == [(1, 2, steps // 2), (2, 2, steps)]
    assert metric in reports[-1]["metrics"]


def assert_same_weights(final: dict[str, Any], uninterrupted: dict[str, Any]) -> None:
    """Tensors by name, equal to a run never stopped's (rtol 1e-5)."""
    from torch.testing import assert_close

    assert final.keys() == uninterrupted.keys()
    for name, tensor in uninterrupted.items():
        assert_close(final[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def assert_rerun_redoes_what_followed_the_last_save(
    script: Path, folder: Path, steps: int, save_steps: int
) -> None:
    """Without the integration: run ``script`` again after a SIGTERM; it starts
    again after its last periodic save, so the steps since are lost and redone."""
    stopped_at = steps_done(folder / "steps.txt")[-1]
    resumed = run(script, script_env(folder, integrated=False))

    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    redone = steps_done(folder / "steps.txt")[stopped_at:]  # the second run's steps
    last_save = stopped_at - stopped_at % save_steps
    assert redone[0] == last_save + 1 and redone[-1] == steps
    assert 0 < stopped_at - last_save <= save_steps  # lost, and done again


def assert_a_notice_on_an_epochs_last_step_reports_it_once(
    script: Path, folder: Path, steps: int
) -> None:
    """SIGTERM in the first epoch's last step: the run after it reports the
    first epoch once (not again) and resumes at that step. Skips where the
    signal came a step late (a loaded machine)."""
    epoch_end = steps // 2
    stopped = run_until_sigterm(
        script, script_env(folder, integrated=True, step_sleep_s=0.5), epoch_end
    )
    assert stopped.returncode == 143, stopped.stdout[-3000:]
    if steps_done(folder / "steps.txt")[-1] != epoch_end:
        pytest.skip("the signal came a step late (a loaded machine): nothing to check")

    resumed = run(script, script_env(folder, integrated=True))

    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    reports = [(e["epoch"], e["step"]) for e in events(folder) if e["type"] == "epoch"]
    assert reports == [(1, epoch_end), (2, steps)]
    assert [e["step"] for e in events(folder) if e["type"] == "resumed"] == [epoch_end]
