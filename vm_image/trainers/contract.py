"""What every built-in trainer reads from the agent, and the digits data they
share: one parser for the ``SPOTLINE_*`` contract, one seeded split."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


class RunSettingsError(ValueError):
    """The environment does not describe a run this trainer can do."""


@dataclass(frozen=True)
class RunSettings:
    """The run as the agent describes it; only SPOTLINE_CHECKPOINT_URL is required."""

    job_id: str
    attempt: int
    epochs: int
    batch_size: int
    seed: int
    validation_split: float
    checkpoint_dir: str
    output_dir: str | None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    fit_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], default_epochs: int = 5, default_batch_size: int = 32
    ) -> RunSettings:
        """Raises RunSettingsError naming the variable that is missing or wrong."""
        try:
            hyper = json.loads(env.get("SPOTLINE_HYPERPARAMETERS") or "{}")
            fit_kwargs = json.loads(env.get("SPOTLINE_FIT_KWARGS") or "{}")
            if not isinstance(hyper, dict) or not isinstance(fit_kwargs, dict):
                raise RunSettingsError(
                    "SPOTLINE_HYPERPARAMETERS and SPOTLINE_FIT_KWARGS must be JSON objects"
                )
            settings = cls(
                job_id=env.get("SPOTLINE_JOB_ID", "local"),
                attempt=int(env.get("SPOTLINE_ATTEMPT", "1")),
                epochs=int(env.get("SPOTLINE_EPOCHS", default_epochs)),
                batch_size=int(env.get("SPOTLINE_BATCH_SIZE", default_batch_size)),
                seed=int(env.get("SPOTLINE_SEED", "0")),
                validation_split=float(env.get("SPOTLINE_VALIDATION_SPLIT", 0.2)),
                checkpoint_dir=env["SPOTLINE_CHECKPOINT_URL"],
                output_dir=env.get("SPOTLINE_OUTPUT_URL") or None,
                hyperparameters=hyper,
                fit_kwargs=fit_kwargs,
            )
        except KeyError as missing:
            raise RunSettingsError(f"{missing.args[0]} is not set") from None
        except (TypeError, ValueError) as error:
            raise RunSettingsError(str(error)) from None
        if settings.epochs < 1 or settings.batch_size < 1:
            raise RunSettingsError("epochs and batch size must be at least 1")
        if not 0.0 <= settings.validation_split < 1.0:
            raise RunSettingsError("SPOTLINE_VALIDATION_SPLIT must be in [0, 1)")
        return settings


@dataclass(frozen=True)
class DigitsSplit:
    """Features scaled to [0, 1] and labels, split into train and validation."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray


def digits_split(seed: int, validation_split: float) -> DigitsSplit:
    """scikit-learn's 1797 bundled digits (nothing downloads), shuffled by
    ``seed`` and split: every built-in trainer sees the same split."""
    from sklearn.datasets import load_digits

    features, labels = load_digits(return_X_y=True)
    x = (features / 16.0).astype(np.float32)
    y = labels.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_val = round(len(y) * validation_split)
    val, train = order[:n_val], order[n_val:]
    return DigitsSplit(x[train], y[train], x[val], y[val])


DATA_DIR_ENV = "SPOTLINE_DATA_DIR"


def training_split(seed: int, validation_split: float, env: Mapping[str, str]) -> DigitsSplit:
    """The job's data set when the agent fetched one (``SPOTLINE_DATA_DIR``),
    else the digits; split the same way for every built-in trainer.

    The data set format: one ``.npz`` file in the folder (``data.npz`` when
    there are several) with ``x`` (samples x features, numbers) and ``y``
    (integer class labels 0..K-1), and optionally ``x_val``/``y_val`` (as
    ``train_X``, ``train_Y`` and ``validation_data``). Without ``x_val``,
    ``validation_split`` of the samples, shuffled by ``seed``, validate.

    Raises:
        RunSettingsError: no ``.npz`` file, or one without the arrays named above.
    """
    folder = env.get(DATA_DIR_ENV)
    if not folder:
        return digits_split(seed, validation_split)
    path = _data_file(Path(folder))
    with np.load(path, allow_pickle=False) as arrays:
        missing = [name for name in ("x", "y") if name not in arrays.files]
        if missing or (("x_val" in arrays.files) != ("y_val" in arrays.files)):
            raise RunSettingsError(
                f"{path.name} must hold arrays x and y (and x_val with y_val, or neither); "
                f"it holds {sorted(arrays.files)}"
            )
        x = arrays["x"].astype(np.float32).reshape(len(arrays["x"]), -1)
        y = arrays["y"].astype(np.int64)
        if len(x) != len(y):
            raise RunSettingsError(f"{path.name}: x has {len(x)} samples and y {len(y)}")
        if "x_val" in arrays.files:
            x_val = arrays["x_val"].astype(np.float32).reshape(len(arrays["x_val"]), -1)
            return DigitsSplit(x, y, x_val, arrays["y_val"].astype(np.int64))
    order = np.random.default_rng(seed).permutation(len(y))
    n_val = round(len(y) * validation_split)
    val, train = order[:n_val], order[n_val:]
    return DigitsSplit(x[train], y[train], x[val], y[val])


def classes_of(split: DigitsSplit) -> int:
    """How many logits a model needs: the labels are 0..K-1, and at least
    the digits' 10 (a digits checkpoint keeps its shape)."""
    top = max(split.y_train.max(initial=0), split.y_val.max(initial=0))
    return max(int(top) + 1, 10)


def _data_file(folder: Path) -> Path:
    found = sorted(folder.rglob("*.npz"))
    named = [path for path in found if path.name == "data.npz"]
    if len(named) == 1 or len(found) == 1:
        return (named or found)[0]
    raise RunSettingsError(
        f"{DATA_DIR_ENV}={folder}: expected one .npz file (or one named data.npz), "
        f"found {len(found)}"
    )
