"""The built-in trainer behind ``spotline.keras.fit``: your compiled Keras model on your arrays.

Run as ``python -m spotline.vm_image.trainers.keras_model`` with the
``SPOTLINE_*`` variables the agent sets. The job's data folder
(``SPOTLINE_DATA_DIR``) holds ``model.keras`` and ``data.npz`` as
``spotline.keras.fit`` wrote them (``keras_inputs``). Training is the model's
own ``fit`` with the spec's epochs, batch size and ``fit_kwargs``, and
:func:`~spotline.keras.spotline_callbacks`: every epoch reported, the state
backed up after each epoch and on SIGTERM, and restored when a later attempt
starts, at the batch after the save. With several GPUs the model is loaded
under ``tf.distribute.MirroredStrategy``, as ``keras_ffnn``'s is.

When every epoch is done the trained model is written to the job's outputs as
``model.keras``, which ``spotline.keras.fit`` loads and returns.

Exit status: 0 when all epochs are done, 143 after a SIGTERM save, 2 for
settings or inputs it cannot run (no new VM fixes them), 3 without the
``tensorflow`` extra.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fsspec

from spotline.vm_image.trainers import keras_inputs
from spotline.vm_image.trainers.contract import DATA_DIR_ENV, RunSettings, RunSettingsError
from spotline.vm_image.trainers.keras_ffnn import (
    EXIT_BAD_SETTINGS,
    EXIT_MISSING_EXTRA,
    RESERVED_FIT_KWARGS,
    distribution_strategy,
    tensorflow_missing,
    uneven_batch,
)

DEFAULT_EPOCHS = 1
DEFAULT_BATCH_SIZE = 32
OUTPUT_MODEL = "model.keras"


def read_settings(env: Mapping[str, str]) -> tuple[RunSettings, Path]:
    """The run and its data folder.

    Raises:
        RunSettingsError: a malformed variable, no data folder, or ``fit_kwargs``
            that set what the spec's own fields set.
    """
    run = RunSettings.from_env(env, DEFAULT_EPOCHS, DEFAULT_BATCH_SIZE)
    folder = env.get(DATA_DIR_ENV)
    if not folder:
        raise RunSettingsError(
            f"{DATA_DIR_ENV} is not set: the job needs data_uri, the folder that "
            "spotline.keras.fit uploads (model.keras and data.npz)"
        )
    reserved = sorted(RESERVED_FIT_KWARGS & run.fit_kwargs.keys())
    if reserved:
        raise RunSettingsError(
            f"SPOTLINE_FIT_KWARGS may not set {reserved}: the job spec's fields set them"
        )
    return run, Path(folder)


def fit_arguments(run: RunSettings, arrays: keras_inputs.FitArrays) -> dict[str, Any]:
    """The keyword arguments of ``model.fit`` beside the callbacks."""
    arguments: dict[str, Any] = {
        "x": arrays.x,
        "y": arrays.y,
        "batch_size": run.batch_size,
        "epochs": run.epochs,
        # One line an epoch: the job log is a file, where a progress bar is noise.
        "verbose": 2,
    }
    if arrays.validation_data is not None:
        arguments["validation_data"] = arrays.validation_data
    elif run.validation_split > 0:
        arguments["validation_split"] = run.validation_split
    return {**arguments, **run.fit_kwargs}


def save_output(model: Any, output_dir: str) -> str:
    """Write ``model`` to ``output_dir``/model.keras (any fsspec URL); returns the URL."""
    url = f"{output_dir.rstrip('/')}/{OUTPUT_MODEL}"
    with tempfile.TemporaryDirectory() as scratch:
        local = Path(scratch) / OUTPUT_MODEL
        model.save(local)  # Keras writes only to a local path ending in .keras
        with fsspec.open(url, "wb") as out:
            out.write(local.read_bytes())
    return url


def train(run: RunSettings, folder: Path) -> int:
    """Fit the data folder's model to ``run.epochs`` from the last backup; the exit code."""
    import keras
    import tensorflow as tf

    # The callbacks' own module: spotline.keras also holds fit, which runs beside a
    # notebook, never on a VM.
    from spotline.keras.callbacks import exit_code, spotline_callbacks, stopped_by_sigterm

    # First: from here on a SIGTERM is a flag, served at a batch end.
    callbacks = spotline_callbacks(run.checkpoint_dir, run.output_dir, env=os.environ)
    gpus = [device.name for device in tf.config.list_logical_devices("GPU")]
    problem = uneven_batch(run.batch_size, len(gpus))
    if problem:
        print(f"keras_model: {problem}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    try:
        arrays = keras_inputs.load(folder)
    except keras_inputs.InputsError as error:
        print(f"keras_model: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    model_file = folder / keras_inputs.MODEL_FILE
    if not model_file.is_file():
        print(f"keras_model: {model_file} is missing", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    # The same seed in every attempt: the same batches in the same order.
    keras.utils.set_random_seed(run.seed)
    with distribution_strategy(tf, gpus).scope():
        model = keras.models.load_model(model_file)
    print(
        f"job {run.job_id} attempt {run.attempt}: {run.epochs} epochs, batch {run.batch_size}, "
        f"keras {keras.__version__}",
        flush=True,
    )
    model.fit(callbacks=callbacks, **fit_arguments(run, arrays))
    if stopped_by_sigterm(callbacks):
        return exit_code(callbacks)
    if run.output_dir:
        print(f"trained model: {save_output(model, run.output_dir)}", flush=True)
    return exit_code(callbacks)


def main(env: Mapping[str, str] | None = None) -> int:
    """Entry point: read the settings from ``env`` (default: the process's) and train."""
    try:
        run, folder = read_settings(os.environ if env is None else env)
    except RunSettingsError as error:
        print(f"keras_model: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    if tensorflow_missing("keras_model"):
        return EXIT_MISSING_EXTRA
    return train(run, folder)


if __name__ == "__main__":
    sys.exit(main())
