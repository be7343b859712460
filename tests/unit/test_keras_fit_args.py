"""``spotline.keras.fit`` refuses what it cannot send before it submits anything,
and rebuilds a Keras ``History`` from a job's epoch records."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from tests.tensorflow_required import require_tensorflow

require_tensorflow("KERAS FIT ARGUMENT TESTS")

import keras  # noqa: E402

import spotline.keras  # noqa: E402
from spotline.keras.fit import history_of  # noqa: E402
from spotline.shared.domain.documents import EpochDoc  # noqa: E402


def model(compiled: bool = True) -> keras.Model:
    built = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(2)])
    if compiled:
        built.compile(optimizer="sgd", loss="mse")
    return built


def test_an_uncompiled_model_is_refused_naming_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"compile it first"):
        spotline.keras.fit(
            model(compiled=False), np.ones((2, 4)), np.ones((2, 2)),
            machine_ids=["g2-standard-4"], epochs=1, batch_size=1,
        )  # fmt: skip


def test_fit_kwargs_may_not_carry_fits_own_parameters() -> None:
    with pytest.raises(ValueError, match=r"\['callbacks', 'epochs'\] are fit's own parameters"):
        spotline.keras.fit(
            model(), np.ones((2, 4)), np.ones((2, 2)),
            machine_ids=["g2-standard-4"], epochs=1, batch_size=1,
            fit_kwargs={"epochs": 3, "callbacks": []},
        )  # fmt: skip


def epoch(number: int, attempt: int, loss: float | None) -> EpochDoc:
    return EpochDoc(
        epoch=number,
        epochs=3,
        attempt=attempt,
        step=number * 10,
        metrics={"loss": loss},
        instance=f"sl-j-a{attempt}",
        at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_history_takes_each_epoch_from_the_last_attempt_that_reported_it() -> None:
    # Attempt 2 resumed inside epoch 2 and reported epoch 1 again.
    records = [epoch(1, 1, 0.9), epoch(1, 2, 0.9), epoch(2, 2, 0.5), epoch(3, 2, None)]

    history = history_of(list(reversed(records)))

    assert history.epoch == [0, 1, 2]
    assert history.history["loss"][:2] == [0.9, 0.5]
    assert np.isnan(history.history["loss"][2])  # not finite on the VM
