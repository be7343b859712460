"""Keras' exact-step resume inside one process: a ``fit`` stopped by SIGTERM in
the middle of an epoch and fitted again ends with the weights and the
``history`` of a ``fit`` never stopped; a finished state says so; the
callbacks work outside spotline. Needs the ``tensorflow`` extra (``make
tensorflow``); without it these tests skip, saying so loudly."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.tensorflow_required import require_tensorflow

require_tensorflow("KERAS RESUME TESTS")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from spotline.keras import (  # noqa: E402
    EXIT_PREEMPTED,
    PreemptibleBackupAndRestore,
    exit_code,
    global_step,
    spotline_callbacks,
)
from spotline.keras import callbacks as keras_callbacks  # noqa: E402
from spotline.vm_image.trainers import keras_ffnn  # noqa: E402

pytestmark = pytest.mark.frameworks

EPOCHS = 3
BATCH = 64
STEPS = 23  # 1438 training samples in batches of 64
DATA = keras_ffnn.load_digits_split(seed=1, validation_split=0.2)


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


@pytest.fixture(autouse=True)
def handler_before() -> Iterator[Any]:
    """This process's SIGTERM handler, put back after the test whatever happens."""
    before = signal.getsignal(signal.SIGTERM)
    yield before
    signal.signal(signal.SIGTERM, before)


def numpy_arrays() -> dict[str, Any]:
    return {"x": DATA.x_train, "y": DATA.y_train, "batch_size": BATCH}


def tf_dataset() -> dict[str, Any]:
    """A shuffled ``tf.data`` pipeline whose order is the same in every epoch."""
    data = tf.data.Dataset.from_tensor_slices((DATA.x_train, DATA.y_train))
    data = data.shuffle(len(DATA.y_train), seed=3, reshuffle_each_iteration=False)
    return {"x": data.batch(BATCH)}


def fit(
    inputs: Callable[[], dict[str, Any]], callbacks: list[Any], *extra: keras.callbacks.Callback
) -> tuple[Any, Any]:
    keras.utils.set_random_seed(1)
    model = keras_ffnn.build_model(keras, lr=1e-3)
    history = model.fit(
        **inputs(),
        epochs=EPOCHS,
        validation_data=(DATA.x_val, DATA.y_val),
        callbacks=[*extra, *callbacks],
        verbose=0,
    )
    return model, history


@pytest.mark.parametrize("inputs", [numpy_arrays, tf_dataset])
def test_a_fit_stopped_mid_epoch_resumes_at_the_saved_batch(
    inputs: Callable[[], dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    straight, straight_history = fit(inputs, [])
    assert global_step(straight) == EPOCHS * STEPS

    stopped_callbacks = spotline_callbacks(str(tmp_path), env={})
    stopped, stopped_history = fit(inputs, stopped_callbacks, SigtermAt(epoch=1, batch=6))
    assert exit_code(stopped_callbacks) == EXIT_PREEMPTED
    assert global_step(stopped) == STEPS + 7
    # The cut-short epoch is not in the history of the run it cut short.
    assert stopped_history.epoch == [0]
    assert len(stopped_history.history["loss"]) == 1
    metadata = json.loads((tmp_path / "training_metadata.json").read_text())
    assert (metadata["epoch"], metadata["batch"], metadata["batches_done"]) == (1, 6, 7)
    next(
        cb for cb in stopped_callbacks if isinstance(cb, PreemptibleBackupAndRestore)
    ).flag.uninstall()

    capsys.readouterr()
    resumed, history = fit(inputs, spotline_callbacks(str(tmp_path), env={}))
    assert f"resumed_from_step={STEPS + 7} epoch=2/3 batches_done=7 " in capsys.readouterr().out
    # Only the batches not done before the save were trained.
    assert global_step(resumed) == EPOCHS * STEPS
    for restored, expected in zip(resumed.weights, straight.weights, strict=True):
        np.testing.assert_allclose(restored.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    assert history.epoch == [0, 1, 2]
    assert history.history.keys() == straight_history.history.keys()
    for name, values in straight_history.history.items():
        # The interrupted epoch's logs count the batches trained before the save.
        assert history.history[name] == pytest.approx(values, rel=1e-5, abs=1e-6), name


def test_a_finished_state_says_so_and_fresh_starts_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fit(numpy_arrays, spotline_callbacks(str(tmp_path), env={}))
    capsys.readouterr()

    again, history = fit(numpy_arrays, spotline_callbacks(str(tmp_path), env={}))
    said = capsys.readouterr().err
    assert "already holds 3 epochs" in said and "nothing is trained" in said
    assert "spotline_callbacks(fresh=True)" in said and "SPOTLINE_FRESH=1" in said
    assert global_step(again) == EPOCHS * STEPS  # restored, not trained
    assert history.epoch == [0, 1, 2]  # the epochs the state holds

    fresh, fresh_history = fit(
        numpy_arrays, spotline_callbacks(str(tmp_path), env={"SPOTLINE_FRESH": "1"})
    )
    out = capsys.readouterr().out
    assert "starting fresh" in out and "resumed_from_step" not in out
    assert global_step(fresh) == EPOCHS * STEPS
    assert fresh_history.epoch == [0, 1, 2]


def test_outside_spotline_the_callbacks_train_in_a_temporary_folder(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keras_callbacks, "_said_outside", False)  # as in a new process
    first = spotline_callbacks(env={})
    _model, history = fit(numpy_arrays, first)
    second = spotline_callbacks(env={})
    out = capsys.readouterr().out
    assert out.count("not on a spotline VM") == 1  # once a process
    backups = [
        cb for cbs in (first, second) for cb in cbs if isinstance(cb, PreemptibleBackupAndRestore)
    ]
    assert backups[0].mirror.local != backups[1].mirror.local
    assert (backups[0].mirror.local / "latest.weights.h5").is_file()
    assert history.epoch == [0, 1, 2] and exit_code(first) == 0
    reports = [json.loads(line) for line in out.splitlines() if line.startswith('{"type":"epoch"')]
    assert [report["epoch"] for report in reports] == [1, 2, 3]


def test_step_time_s_slows_every_batch(tmp_path: Path) -> None:
    env = {"SPOTLINE_HYPERPARAMETERS": json.dumps({"step_time_s": 0.02})}
    started = time.perf_counter()
    fit(numpy_arrays, spotline_callbacks(str(tmp_path), env=env))
    assert time.perf_counter() - started >= EPOCHS * STEPS * 0.02
    with pytest.raises(ValueError, match="step_time_s"):
        spotline_callbacks(str(tmp_path), env={"SPOTLINE_HYPERPARAMETERS": '{"step_time_s": "x"}'})
    with pytest.raises(ValueError, match="step_time_s"):
        spotline_callbacks(str(tmp_path), step_time_s=-1.0)
