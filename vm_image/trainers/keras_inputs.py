"""What ``spotline.keras.fit`` hands the ``keras_model`` trainer, and how.

The job's data folder holds two files: ``model.keras`` (the compiled model, as
``model.save`` writes it) and ``data.npz`` (the arrays ``fit`` was given). A
model with several inputs or outputs takes a list or a dict of arrays: each
array is stored under its own key (``x.0``, ``x.1``; ``x.image``) and a JSON
string under ``structure`` says which shape to rebuild, so the trainer calls
``model.fit`` with exactly what the user passed. Arrays are loaded with
``allow_pickle=False``: an object array (a list of Python objects) is refused
when it is saved, not run when it is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MODEL_FILE = "model.keras"
DATA_FILE = "data.npz"
STRUCTURE_KEY = "structure"
ROLES = ("x", "y", "x_val", "y_val")


class InputsError(ValueError):
    """Arrays that cannot travel to the trainer, or a data folder it cannot read."""


@dataclass(frozen=True)
class FitArrays:
    """``fit``'s arrays, each an array, a list of arrays or a dict of arrays."""

    x: Any
    y: Any
    validation_data: tuple[Any, Any] | None = None


def pack(arrays: FitArrays) -> dict[str, np.ndarray]:
    """The ``np.savez`` keyword arguments that hold ``arrays``.

    Raises:
        InputsError: a value that is not an array (or a list or dict of them),
            an object array, or validation data that is not ``(x_val, y_val)``.
    """
    values: dict[str, Any] = {"x": arrays.x, "y": arrays.y}
    if arrays.validation_data is not None:
        if not isinstance(arrays.validation_data, tuple | list) or len(arrays.validation_data) != 2:
            raise InputsError(
                "validation_data: give (x_val, y_val); sample weights go in fit_kwargs"
            )
        values["x_val"], values["y_val"] = arrays.validation_data
    out: dict[str, np.ndarray] = {}
    structure: dict[str, str] = {}
    for role, value in values.items():
        structure[role] = _pack_one(role, value, out)
    out[STRUCTURE_KEY] = np.array(json.dumps(structure))
    return out


def save(folder: Path, arrays: FitArrays) -> Path:
    """Write ``data.npz`` for ``arrays`` into ``folder``; returns its path."""
    path = folder / DATA_FILE
    np.savez(path, **pack(arrays))  # type: ignore[arg-type]
    return path


def load(folder: Path) -> FitArrays:
    """The arrays ``save`` wrote into ``folder``.

    Raises:
        InputsError: no ``data.npz``, or one that ``save`` did not write.
    """
    path = folder / DATA_FILE
    if not path.is_file():
        raise InputsError(f"{path}: missing; spotline.keras.fit writes it into the data folder")
    with np.load(path, allow_pickle=False) as stored:
        if STRUCTURE_KEY not in stored.files:
            raise InputsError(f"{path}: no {STRUCTURE_KEY!r} entry; write it with keras_inputs")
        structure = json.loads(str(stored[STRUCTURE_KEY]))
        loaded = {role: _unpack_one(role, kind, stored) for role, kind in structure.items()}
    validation = None
    if "x_val" in loaded:
        validation = (loaded["x_val"], loaded["y_val"])
    return FitArrays(loaded["x"], loaded["y"], validation)


def _pack_one(role: str, value: Any, out: dict[str, np.ndarray]) -> str:
    if isinstance(value, Mapping):
        for name, item in value.items():
            if not isinstance(name, str) or not name:
                raise InputsError(f"{role}: dict keys must be input or output names (strings)")
            out[f"{role}.{name}"] = _array(f"{role}[{name!r}]", item)
        return "dict"
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        for index, item in enumerate(value):
            out[f"{role}.{index}"] = _array(f"{role}[{index}]", item)
        return f"list:{len(value)}"
    out[role] = _array(role, value)
    return "array"


def _unpack_one(role: str, kind: str, stored: Any) -> Any:
    if kind == "array":
        return stored[role]
    if kind == "dict":
        prefix = f"{role}."
        return {key[len(prefix) :]: stored[key] for key in stored.files if key.startswith(prefix)}
    if kind.startswith("list:"):
        return [stored[f"{role}.{index}"] for index in range(int(kind.split(":", 1)[1]))]
    raise InputsError(f"{role}: unknown structure {kind!r}")


def _array(name: str, value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == object:
        raise InputsError(
            f"{name}: an array of Python objects cannot be sent safely; "
            "give numbers, booleans or strings (NumPy arrays, or what np.asarray turns into one)"
        )
    return array
