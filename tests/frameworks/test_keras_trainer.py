"""The built-in Keras trainer, run as the agent runs it, and the Keras callbacks.

Needs the ``tensorflow`` extra (``make tensorflow``, which CI runs); without
it these tests skip, saying so loudly.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.tensorflow_required import require_tensorflow

require_tensorflow("KERAS TRAINER TESTS")

import keras  # noqa: E402

from spotline.keras import (  # noqa: E402
    EXIT_PREEMPTED,
    PreemptibleBackupAndRestore,
    exit_code,
    global_step,
    local_path,
    spotline_callbacks,
)
from spotline.vm_image.trainers import keras_ffnn  # noqa: E402

pytestmark = pytest.mark.frameworks

REPO = Path(__file__).resolve().parents[2]
# 1438 training samples in batches of 4: 360 steps, about a second an epoch,
# room to land a SIGTERM inside epoch 2 after seeing epoch 1 end.
SMALL_BATCHES = {"SPOTLINE_BATCH_SIZE": "4", "SPOTLINE_SEED": "7"}
STEPS_SMALL = 360


@dataclass
class TrainerRun:
    """One trainer process with its checkpoint folder and events file."""

    process: subprocess.Popen[str]
    workdir: Path
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = field(default=None)

    @property
    def checkpoint_dir(self) -> Path:
        return self.workdir / "checkpoints"

    def wait(self, timeout: float = 120) -> int:
        if self.returncode is None:
            self.stdout, self.stderr = self.process.communicate(timeout=timeout)
            self.returncode = self.process.returncode
        return self.returncode

    def events(self, kind: str) -> list[dict[str, Any]]:
        path = self.workdir / "events.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [event for event in map(json.loads, lines) if event["type"] == kind]

    def wait_for_event(self, kind: str, found: Callable[[dict[str, Any]], bool]) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(found(event) for event in self.events(kind)):
                return
            if self.process.poll() is not None:
                raise AssertionError(f"trainer exited early: {self.process.communicate()}")
            time.sleep(0.005)
        raise AssertionError(f"no {kind} event within 120 s")


def start_trainer(workdir: Path, epochs: int, **settings: str) -> TrainerRun:
    """Start the trainer with the agent's environment contract, rooted at ``workdir``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("SPOTLINE_")}
    env |= {
        "SPOTLINE_JOB_ID": "job-test",
        "SPOTLINE_ATTEMPT": "1",
        "SPOTLINE_EPOCHS": str(epochs),
        "SPOTLINE_CHECKPOINT_URL": (workdir / "checkpoints").as_uri(),
        "SPOTLINE_OUTPUT_URL": (workdir / "output").as_uri(),
        "SPOTLINE_EVENTS": str(workdir / "events.jsonl"),
        "SPOTLINE_VALIDATION_SPLIT": "0.2",
        **settings,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "spotline.vm_image.trainers.keras_ffnn"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return TrainerRun(process, workdir)


@pytest.fixture(scope="module")
def uninterrupted_2_epochs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrainerRun]:
    """A 2-epoch run with small batches, started early so it overlaps other runs."""
    run = start_trainer(tmp_path_factory.mktemp("reference"), epochs=2, **SMALL_BATCHES)
    yield run
    if run.process.poll() is None:
        run.process.kill()
        run.process.communicate()


def test_three_epochs_learn_and_a_rerun_trains_no_further(tmp_path: Path) -> None:
    run = start_trainer(tmp_path, epochs=3)
    assert run.wait() == 0, run.stderr

    epochs = run.events("epoch")
    assert [event["epoch"] for event in epochs] == [1, 2, 3]
    assert all(event["epochs"] == 3 for event in epochs)
    assert [event["step"] for event in epochs] == [45, 90, 135]  # 1438 samples, batch 32
    # Seeds 0-9 reach 0.947-0.972 after 3 epochs; chance is 0.1.
    assert epochs[-1]["metrics"]["val_accuracy"] > 0.9
    assert epochs[-1]["metrics"]["loss"] < epochs[0]["metrics"]["loss"]
    assert epochs[-1]["checkpoint_uri"] == (run.checkpoint_dir / "latest.weights.h5").as_uri()
    metadata = json.loads((run.checkpoint_dir / "training_metadata.json").read_text())
    assert metadata["epoch"] == 3
    if importlib.util.find_spec("tensorboard") is not None:
        assert list((tmp_path / "output" / "tensorboard").rglob("events.out.tfevents.*"))
    else:
        assert "the tensorboard package is not installed" in run.stdout

    again = start_trainer(tmp_path, epochs=3)
    assert again.wait() == 0, again.stderr
    assert len(again.events("epoch")) == 3  # the first run's, in the shared events file
    assert [event["step"] for event in again.events("resumed")] == [135]
    assert "already holds 3 epochs" in again.stderr  # not a silent no-op


def test_resume_at_an_epoch_end_matches_the_uninterrupted_run(
    tmp_path: Path, uninterrupted_2_epochs: TrainerRun
) -> None:
    first = start_trainer(tmp_path, epochs=1, **SMALL_BATCHES)
    assert first.wait() == 0, first.stderr
    second = start_trainer(tmp_path, epochs=2, **SMALL_BATCHES)
    assert second.wait() == 0, second.stderr

    assert [event["step"] for event in second.events("resumed")] == [STEPS_SMALL]
    assert uninterrupted_2_epochs.wait() == 0, uninterrupted_2_epochs.stderr
    # Keras' fit visits a seeded array in the same order in every epoch and
    # every process, so a restart at an epoch boundary repeats the same steps.
    resumed, expected = second.events("epoch")[-1], uninterrupted_2_epochs.events("epoch")[-1]
    assert (resumed["epoch"], resumed["step"]) == (expected["epoch"], expected["step"])
    for name, value in expected["metrics"].items():
        assert resumed["metrics"][name] == pytest.approx(value, abs=1e-6), name


def test_sigterm_mid_epoch_saves_and_exits_143_then_resumes_at_the_saved_step(
    tmp_path: Path, uninterrupted_2_epochs: TrainerRun
) -> None:
    run = start_trainer(tmp_path, epochs=2, **SMALL_BATCHES)
    run.wait_for_event("epoch", lambda event: event["epoch"] == 1)
    # Epoch 2 takes about a second: after this pause the signal lands inside it.
    time.sleep(0.2)
    run.process.send_signal(signal.SIGTERM)
    run.wait_for_event("checkpoint", lambda event: True)
    # A preempted VM's shutdown signals every process, and the agent passes
    # the notice on as well: a second SIGTERM changes nothing.
    run.process.send_signal(signal.SIGTERM)
    assert run.wait() == EXIT_PREEMPTED, run.stderr

    [checkpoint] = run.events("checkpoint")
    assert checkpoint["reason"] == "sigterm"
    assert checkpoint["uri"] == (run.checkpoint_dir / "latest.weights.h5").as_uri()
    done_in_epoch_2 = checkpoint["step"] - STEPS_SMALL
    assert 0 < done_in_epoch_2 < STEPS_SMALL
    assert [event["epoch"] for event in run.events("epoch")] == [1]  # the cut-short one is not
    metadata = json.loads((run.checkpoint_dir / "training_metadata.json").read_text())
    assert (metadata["epoch"], metadata["batch"]) == (1, done_in_epoch_2 - 1)  # Keras' fields
    assert (metadata["batches_done"], metadata["step"]) == (done_in_epoch_2, checkpoint["step"])

    resumed = start_trainer(tmp_path, epochs=2, **SMALL_BATCHES)
    assert resumed.wait() == 0, resumed.stderr
    assert [event["step"] for event in resumed.events("resumed")] == [checkpoint["step"]]
    first, second = resumed.events("epoch")
    assert (first["epoch"], second["epoch"], second["epochs"]) == (1, 2, 2)
    assert f"resumed_from_step={checkpoint['step']} epoch=2/2 " in resumed.stdout
    # Epoch 2 went on from the batch after the save: no batch trained twice,
    # and the run ends where the run never stopped ends, metrics included.
    assert second["step"] == 2 * STEPS_SMALL
    assert uninterrupted_2_epochs.wait() == 0, uninterrupted_2_epochs.stderr
    expected = uninterrupted_2_epochs.events("epoch")[-1]
    for name, value in expected["metrics"].items():
        assert second["metrics"][name] == pytest.approx(value, rel=1e-4, abs=1e-5), name


def test_fit_kwargs_pass_through(tmp_path: Path) -> None:
    fit_kwargs = {"steps_per_epoch": 5, "validation_freq": 2, "shuffle": False}
    run = start_trainer(tmp_path, epochs=2, SPOTLINE_FIT_KWARGS=json.dumps(fit_kwargs))
    assert run.wait() == 0, run.stderr

    first, second = run.events("epoch")
    assert (first["step"], second["step"]) == (5, 10)
    assert "val_loss" not in first["metrics"]
    assert "val_loss" in second["metrics"]


@pytest.mark.parametrize(
    "setting",
    [
        {"SPOTLINE_FIT_KWARGS": '{"epochs": 9}'},
        {"SPOTLINE_FIT_KWARGS": "[1]"},
        {"SPOTLINE_HYPERPARAMETERS": '{"lr": -1}'},
        {"SPOTLINE_VALIDATION_SPLIT": "1.5"},
        {"SPOTLINE_CHECKPOINT_URL": ""},
    ],
)
def test_settings_it_cannot_run_exit_2(
    setting: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"SPOTLINE_CHECKPOINT_URL": "/nowhere", **setting}
    if not env["SPOTLINE_CHECKPOINT_URL"]:
        del env["SPOTLINE_CHECKPOINT_URL"]
    assert keras_ffnn.main(env) == keras_ffnn.EXIT_BAD_SETTINGS
    assert capsys.readouterr().err.startswith("keras_ffnn: ")


def test_without_tensorflow_the_trainer_names_the_extra() -> None:
    script = (
        "import sys; sys.modules['tensorflow'] = sys.modules['keras'] = None; "
        "from spotline.vm_image.trainers.keras_ffnn import main; "
        "sys.exit(main({'SPOTLINE_CHECKPOINT_URL': '/nowhere'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == keras_ffnn.EXIT_MISSING_EXTRA
    assert "pip install 'spotline[tensorflow]'" in done.stderr


class SigtermAt(keras.callbacks.Callback):
    """Sends this process SIGTERM at the end of one batch, as a preemption would."""

    def __init__(self, epoch: int, batch: int) -> None:
        super().__init__()
        self.at = (epoch, batch)
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if (self.epoch, batch) == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture
def handler_before() -> Iterator[Any]:
    """This process's SIGTERM handler, put back after the test whatever happens."""
    before = signal.getsignal(signal.SIGTERM)
    yield before
    signal.signal(signal.SIGTERM, before)


def test_callbacks_in_a_users_fit_save_state_that_reloads_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handler_before: Any
) -> None:
    monkeypatch.setenv("SPOTLINE_EVENTS", str(tmp_path / "events.jsonl"))
    data = keras_ffnn.load_digits_split(seed=1, validation_split=0.2)
    keras.utils.set_random_seed(1)
    model = keras_ffnn.build_model(keras, lr=1e-3)
    callbacks = spotline_callbacks(tmp_path.as_uri(), env={})
    model.fit(
        data.x_train,
        data.y_train,
        batch_size=64,
        epochs=3,
        callbacks=[SigtermAt(epoch=1, batch=6), *callbacks],
        verbose=0,
    )
    assert exit_code(callbacks) == EXIT_PREEMPTED
    # Still a flag after fit: a second SIGTERM must not kill the process.
    backup = next(cb for cb in callbacks if isinstance(cb, PreemptibleBackupAndRestore))
    assert signal.getsignal(signal.SIGTERM) == backup.flag._on_sigterm
    backup.flag.uninstall()
    assert signal.getsignal(signal.SIGTERM) == handler_before
    assert global_step(model) == 23 + 7  # 1438 samples in batches of 64, then 7 batches

    fresh = keras_ffnn.build_model(keras, lr=1e-3)
    fresh.optimizer.build(fresh.trainable_variables)
    fresh.load_weights(local_path((tmp_path / "latest.weights.h5").as_uri()))
    for saved, live in zip(fresh.weights, model.weights, strict=True):
        assert (saved.numpy() == live.numpy()).all()
    for saved, live in zip(fresh.optimizer.variables, model.optimizer.variables, strict=True):
        assert (saved.numpy() == live.numpy()).all()

    again = keras_ffnn.build_model(keras, lr=1e-3)
    history = again.fit(
        data.x_train,
        data.y_train,
        batch_size=64,
        epochs=3,
        callbacks=spotline_callbacks(str(tmp_path), env={}),
        verbose=0,
    )
    assert history.epoch == [0, 1, 2]  # epoch 1 from the state, 2 from its batch 8
    assert global_step(again) == 3 * 23
    assert signal.getsignal(signal.SIGTERM) == handler_before
