"""The keras_model trainer: a user's own compiled Keras model and arrays, as
``spotline.keras.fit`` hands them over, trained by the model's own ``fit``.

Stopped by SIGTERM in the middle of an epoch and started again, it ends with
the weights of an uninterrupted run, and an uninterrupted run ends with what
``model.fit`` gives in the user's own process with the same seed.
Needs the ``tensorflow`` extra (``make tensorflow``, which CI runs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from tests.tensorflow_required import require_tensorflow

require_tensorflow("KERAS MODEL TRAINER TESTS")

import keras  # noqa: E402

from spotline.keras import EXIT_PREEMPTED  # noqa: E402
from spotline.vm_image.trainers.keras_inputs import MODEL_FILE, FitArrays, save  # noqa: E402
from tests.frameworks.test_keras_trainer import TrainerRun  # noqa: E402

pytestmark = pytest.mark.frameworks

REPO = Path(__file__).resolve().parents[2]
SEED = 3
BATCH = 4
EPOCHS = 2


def user_model() -> keras.Model:
    """A model as a user writes one: two inputs, compiled with their own choices."""
    keras.utils.set_random_seed(SEED)
    pixels = keras.Input(shape=(64,), name="pixels")
    row_sums = keras.Input(shape=(8,), name="row_sums")
    joined = keras.layers.Concatenate()([pixels, row_sums])
    hidden = keras.layers.Dense(32, activation="relu")(joined)
    model = keras.Model([pixels, row_sums], keras.layers.Dense(10)(hidden))
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def user_arrays() -> FitArrays:
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)[:1200]
    rows = x.reshape(-1, 8, 8).sum(axis=2)
    y = digits.target[:1200]
    inputs = {"pixels": x[:1000], "row_sums": rows[:1000]}
    validation = ({"pixels": x[1000:], "row_sums": rows[1000:]}, y[1000:])
    return FitArrays(inputs, y[:1000], validation)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    user_model().save(folder / MODEL_FILE)
    save(folder, user_arrays())
    return folder


def start(workdir: Path, data_dir: Path, attempt: int = 1) -> TrainerRun:
    env = {name: value for name, value in os.environ.items() if not name.startswith("SPOTLINE_")}
    env |= {
        "SPOTLINE_JOB_ID": "job-test",
        "SPOTLINE_ATTEMPT": str(attempt),
        "SPOTLINE_EPOCHS": str(EPOCHS),
        "SPOTLINE_BATCH_SIZE": str(BATCH),
        "SPOTLINE_SEED": str(SEED),
        "SPOTLINE_VALIDATION_SPLIT": "0",
        "SPOTLINE_DATA_DIR": str(data_dir),
        "SPOTLINE_CHECKPOINT_URL": (workdir / "checkpoints").as_uri(),
        "SPOTLINE_OUTPUT_URL": (workdir / "output").as_uri(),
        "SPOTLINE_EVENTS": str(workdir / "events.jsonl"),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "spotline.vm_image.trainers.keras_model"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return TrainerRun(process, workdir)


def trained(workdir: Path) -> list[np.ndarray]:
    return keras.models.load_model(workdir / "output" / MODEL_FILE).get_weights()


def test_an_uninterrupted_run_is_the_users_own_fit(tmp_path: Path, data_dir: Path) -> None:
    run = start(tmp_path, data_dir)
    assert run.wait() == 0, run.stderr

    keras.utils.set_random_seed(SEED)
    model = keras.models.load_model(data_dir / MODEL_FILE)
    arrays = user_arrays()
    history = model.fit(
        arrays.x,
        arrays.y,
        batch_size=BATCH,
        epochs=EPOCHS,
        validation_data=arrays.validation_data,
        verbose=0,
    )
    for got, expected in zip(trained(tmp_path), model.get_weights(), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    reported = {epoch["epoch"]: epoch["metrics"] for epoch in run.events("epoch")}
    assert sorted(reported) == [1, 2]
    for name, values in history.history.items():
        assert [reported[1][name], reported[2][name]] == pytest.approx(values, rel=1e-4), name


def test_sigterm_mid_epoch_then_a_new_attempt_ends_as_the_uninterrupted_run(
    tmp_path: Path, data_dir: Path
) -> None:
    reference = start(tmp_path / "reference", data_dir)
    run = start(tmp_path / "job", data_dir)
    run.wait_for_event("epoch", lambda event: event["epoch"] == 1)
    time.sleep(0.2)  # an epoch is 250 steps, about a second: the signal lands inside epoch 2
    run.process.send_signal(signal.SIGTERM)
    assert run.wait() == EXIT_PREEMPTED, run.stderr
    [checkpoint] = run.events("checkpoint")
    # Inside epoch 2; on a loaded machine the signal may come before its first step.
    assert 250 <= checkpoint["step"] < 500
    assert not (tmp_path / "job" / "output" / MODEL_FILE).exists()  # not trained yet

    resumed = start(tmp_path / "job", data_dir, attempt=2)
    assert resumed.wait() == 0, resumed.stderr
    assert [event["step"] for event in resumed.events("resumed")] == [checkpoint["step"]]
    assert reference.wait() == 0, reference.stderr
    for got, expected in zip(
        trained(tmp_path / "job"), trained(tmp_path / "reference"), strict=True
    ):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_a_data_folder_without_the_model_fails_naming_it(tmp_path: Path) -> None:
    save(tmp_path, user_arrays())
    run = start(tmp_path / "job", tmp_path)

    assert run.wait() == 2
    assert f"{tmp_path / MODEL_FILE} is missing" in run.stderr
