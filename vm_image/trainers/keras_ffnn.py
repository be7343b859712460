"""The built-in Keras trainer: a feed-forward network on scikit-learn's digits.

Run as ``python -m spotline.vm_image.trainers.keras_ffnn`` with the ``SPOTLINE_*``
variables the agent sets. The model is Aibro's example's (Dense 256 ReLU,
Dense 256 ReLU, Dense 10 logits; Adam; sparse cross-entropy from logits;
sparse categorical accuracy) on 8x8 digits scaled to [0, 1], and training is a
plain ``model.fit`` with :func:`~spotline.keras.spotline_callbacks`.
On a machine with several GPUs the model is built under
``tf.distribute.MirroredStrategy``: each batch is split evenly across them.

Resuming is the callbacks': from the last epoch end, or after a SIGTERM in the
middle of an epoch, from the batch after the save, with the weights and
optimizer state saved at the signal (see ``spotline.keras``).

Exit status: 0 when all epochs are done, 143 after a SIGTERM save, 2 for
settings it cannot run, 3 without the ``tensorflow`` extra.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spotline.vm_image.trainers.contract import (
    DigitsSplit,
    RunSettings,
    RunSettingsError,
    classes_of,
    training_split,
)

EXIT_BAD_SETTINGS = 2
EXIT_MISSING_EXTRA = 3

DEFAULT_EPOCHS = 5
DEFAULT_BATCH_SIZE = 32
DEFAULT_LR = 1e-3  # Keras' Adam default
HIDDEN = 256
# fit() arguments that the spec's own fields or the trainer set.
RESERVED_FIT_KWARGS = frozenset(
    {
        "x",
        "y",
        "batch_size",
        "epochs",
        "initial_epoch",
        "validation_data",
        "validation_split",
        "callbacks",
    }
)


@dataclass(frozen=True)
class Settings:
    """The run as the agent describes it in ``SPOTLINE_*`` variables."""

    job_id: str
    attempt: int
    epochs: int
    batch_size: int
    seed: int
    validation_split: float
    lr: float
    checkpoint_dir: str
    output_dir: str | None
    fit_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Read the settings; only ``SPOTLINE_CHECKPOINT_URL`` is required.

        Raises:
            RunSettingsError: a value is missing, malformed or out of range, or
                ``SPOTLINE_FIT_KWARGS`` sets an argument the trainer owns.
        """
        run = RunSettings.from_env(env, DEFAULT_EPOCHS, DEFAULT_BATCH_SIZE)
        try:
            lr = float(run.hyperparameters.get("lr", DEFAULT_LR))
        except (TypeError, ValueError) as error:
            raise RunSettingsError(f"SPOTLINE_HYPERPARAMETERS: {error}") from None
        settings = cls(
            job_id=run.job_id,
            attempt=run.attempt,
            epochs=run.epochs,
            batch_size=run.batch_size,
            seed=run.seed,
            validation_split=run.validation_split,
            lr=lr,
            checkpoint_dir=run.checkpoint_dir,
            output_dir=run.output_dir,
            fit_kwargs=run.fit_kwargs,
        )
        if settings.lr <= 0:
            raise RunSettingsError("lr must be positive")
        reserved = sorted(RESERVED_FIT_KWARGS & settings.fit_kwargs.keys())
        if reserved:
            raise RunSettingsError(
                f"SPOTLINE_FIT_KWARGS may not set {reserved}: the job spec's fields set them"
            )
        return settings


def load_digits_split(
    seed: int, validation_split: float, env: Mapping[str, str] | None = None
) -> DigitsSplit:
    """The same split as ``digits_mlp`` for the same seed, fraction and data
    set (``SPOTLINE_DATA_DIR`` in ``env``: ``contract.training_split``)."""
    return training_split(seed, validation_split, env or {})


def build_model(keras: Any, lr: float, features: int = 64, classes: int = 10) -> Any:
    """The network, compiled: ``features`` inputs (the digits' 64
    pixels) -> 256 -> 256 -> ``classes`` logits."""
    inputs = keras.Input(shape=(features,))
    hidden = keras.layers.Dense(HIDDEN, activation="relu")(inputs)
    hidden = keras.layers.Dense(HIDDEN, activation="relu")(hidden)
    model = keras.Model(inputs, keras.layers.Dense(classes)(hidden))
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=lr),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    return model


def mirrors(gpus: int) -> bool:
    """Whether a machine with ``gpus`` GPUs trains with MirroredStrategy: with
    several, as Aibro does, one replica on each, in this one
    process (the agent starts one per node for this trainer)."""
    return gpus > 1


def distribution_strategy(tf: Any, devices: list[str]) -> Any:
    """MirroredStrategy over ``devices`` where there are several, else
    TensorFlow's default strategy (one device)."""
    if mirrors(len(devices)):
        return tf.distribute.MirroredStrategy(devices=devices)
    return tf.distribute.get_strategy()


def uneven_batch(batch_size: int, gpus: int) -> str | None:
    """Why MirroredStrategy cannot split ``batch_size`` evenly across ``gpus``
    GPUs, or None. Submission refuses such a job for a machine in the
    catalog; this catches the GPUs actually found."""
    if mirrors(gpus) and batch_size % gpus:
        return (
            f"batch size {batch_size} is not a multiple of the {gpus} GPUs "
            "MirroredStrategy splits it across"
        )
    return None


def train(settings: Settings) -> int:
    """Fit to ``settings.epochs`` from the last backup; return the exit code."""
    import keras
    import tensorflow as tf

    # The callbacks' own module: spotline.keras also holds fit, which runs beside a
    # notebook, never on a VM.
    from spotline.keras.callbacks import (
        exit_code,
        spotline_callbacks,
        stopped_by_sigterm,
    )

    # First: from here on a SIGTERM is a flag, served at a batch end.
    callbacks = spotline_callbacks(settings.checkpoint_dir, settings.output_dir, env=os.environ)
    gpus = [device.name for device in tf.config.list_logical_devices("GPU")]
    problem = uneven_batch(settings.batch_size, len(gpus))
    if problem:
        print(f"keras_ffnn: {problem}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    strategy = distribution_strategy(tf, gpus)
    keras.utils.set_random_seed(settings.seed)
    data = load_digits_split(settings.seed, settings.validation_split, os.environ)
    with strategy.scope():  # the model's variables: one copy on each GPU
        model = build_model(keras, settings.lr, data.x_train.shape[1], classes_of(data))
    validation = (data.x_val, data.y_val) if len(data.y_val) else None
    steps_per_epoch = -(-len(data.y_train) // settings.batch_size)
    print(
        f"job {settings.job_id} attempt {settings.attempt}: {settings.epochs} epochs of "
        f"{steps_per_epoch} steps ({len(data.y_train)} samples, batch {settings.batch_size}), "
        f"keras {keras.__version__}, {strategy.num_replicas_in_sync} replica(s)",
        flush=True,
    )
    started = time.perf_counter()
    model.fit(
        data.x_train,
        data.y_train,
        batch_size=settings.batch_size,
        epochs=settings.epochs,
        validation_data=validation,
        callbacks=callbacks,
        # One line an epoch: the job log is a file, where a progress bar is noise.
        **{"verbose": 2, **settings.fit_kwargs},
    )
    took = time.perf_counter() - started
    if stopped_by_sigterm(callbacks):
        print(f"stopped by SIGTERM after {took:.3f}s of fit", flush=True)
    else:
        print(f"all {settings.epochs} epochs done in {took:.3f}s", flush=True)
    return exit_code(callbacks)


def main(env: Mapping[str, str] | None = None) -> int:
    """Entry point: read the settings from ``env`` (default: the process's) and train."""
    try:
        settings = Settings.from_env(os.environ if env is None else env)
    except RunSettingsError as error:
        print(f"keras_ffnn: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    if tensorflow_missing("keras_ffnn"):
        return EXIT_MISSING_EXTRA
    return train(settings)


def tensorflow_missing(trainer: str) -> bool:
    """Whether TensorFlow and Keras cannot be imported; if so, ``trainer`` says
    which extra brings them."""
    try:
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
    except ImportError as missing:
        print(
            f"{trainer}: TensorFlow is not installed ({missing}): "
            "install the extra, pip install 'spotline[tensorflow]'",
            file=sys.stderr,
        )
        return True
    return False


if __name__ == "__main__":
    sys.exit(main())
