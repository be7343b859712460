"""What ``spotline.keras.fit`` sends the keras_model trainer: arrays as given,
in one ``data.npz`` that loads without pickle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spotline.vm_image.trainers.keras_inputs import (
    DATA_FILE,
    FitArrays,
    InputsError,
    load,
    save,
)


def test_arrays_lists_and_dicts_come_back_as_given(tmp_path: Path) -> None:
    x = {"image": np.arange(12, dtype=np.float32).reshape(3, 4), "tag": np.array([1, 2, 3])}
    y = [np.array([0, 1, 0]), np.array([[1.5], [2.5], [3.5]])]
    validation = (
        {"image": np.zeros((1, 4), np.float32), "tag": np.array([9])},
        [np.array([1]), np.array([[0.5]])],
    )
    save(tmp_path, FitArrays(x, y, validation))

    loaded = load(tmp_path)

    assert set(loaded.x) == {"image", "tag"}
    assert loaded.x["image"].dtype == np.float32 and np.array_equal(loaded.x["image"], x["image"])
    assert isinstance(loaded.y, list) and len(loaded.y) == 2
    assert np.array_equal(loaded.y[1], y[1])
    assert loaded.validation_data is not None
    assert np.array_equal(loaded.validation_data[0]["tag"], [9])


def test_a_plain_pair_without_validation(tmp_path: Path) -> None:
    save(tmp_path, FitArrays(np.ones((2, 3)), np.array([0, 1])))

    loaded = load(tmp_path)

    assert loaded.x.shape == (2, 3) and loaded.validation_data is None


def test_python_objects_are_refused_when_saved_not_run_when_loaded(tmp_path: Path) -> None:
    with pytest.raises(InputsError, match=r"x: an array of Python objects"):
        save(tmp_path, FitArrays(np.array([{"a": 1}, None], dtype=object), np.array([0, 1])))
    with pytest.raises(InputsError, match=r"validation_data: give \(x_val, y_val\)"):
        save(tmp_path, FitArrays(np.ones(2), np.ones(2), (np.ones(2),)))  # type: ignore[arg-type]


def test_a_folder_without_the_arrays_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(InputsError, match=DATA_FILE):
        load(tmp_path)
    np.savez(tmp_path / DATA_FILE, x=np.ones(2), y=np.ones(2))
    with pytest.raises(InputsError, match="no 'structure' entry"):
        load(tmp_path)
