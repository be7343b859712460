"""Keras callbacks that make a user's own ``model.fit(...)`` a spotline trainer.

Add them to ``fit`` and exit with the code they give::

    from vm_image.trainers.keras_callbacks import exit_code, spotline_callbacks

    callbacks = spotline_callbacks()  # reads SPOTLINE_CHECKPOINT_DIR, SPOTLINE_OUTPUT_DIR
    model.fit(x, y, epochs=epochs, callbacks=callbacks)
    sys.exit(exit_code(callbacks))  # 143 after a SIGTERM save, else 0

They report every epoch to the agent, write TensorBoard logs, back the training
state up after every epoch with Keras' ``BackupAndRestore`` and restore it when
the job starts again, and on SIGTERM (the Spot preemption notice) save the
state at the next batch end and stop training.

What a resume restores (Keras 3, checked with 3.15): the model weights and all
optimizer variables, ``iterations`` (the global step) included, exactly as they
were at the save. Keras resumes at an epoch boundary only: after a save in the
middle of epoch ``e`` the new run starts epoch ``e`` again from its first batch,
on top of the saved weights, so the batches already done in that epoch are
trained once more and the global step ends higher than in a run never stopped.
The order in which an epoch visits the samples is not saved; with NumPy inputs
and ``keras.utils.set_random_seed``, Keras on TensorFlow (2.21) visits them in
the same order in every epoch and every process, so a resume from an epoch end
repeats the uninterrupted run's steps exactly.

Needs the ``tensorflow`` extra: ``pip install 'spotline[tensorflow]'``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import time
from collections.abc import Iterable, Mapping
from types import FrameType
from typing import Any

from vm_image.trainers import state_mirror
from vm_image.trainers.checkpoint_files import KERAS_STATE_FILE
from vm_image.trainers.report import report_checkpoint, report_epoch, report_resumed

try:
    import keras
except ImportError as missing:
    raise ImportError(
        "vm_image.trainers.keras_callbacks needs TensorFlow: pip install 'spotline[tensorflow]'"
    ) from missing

__all__ = [
    "EXIT_PREEMPTED",
    "EpochReporter",
    "PreemptibleBackupAndRestore",
    "SigtermFlag",
    "exit_code",
    "global_step",
    "local_path",
    "spotline_callbacks",
    "stopped_by_sigterm",
]

# What a shell reports for a process ended by SIGTERM; the agent reads it as
# "stopped on request, checkpoint saved".
EXIT_PREEMPTED = 143
# What BackupAndRestore writes for one state, the file that names the epoch to
# start from last: a copy cut short leaves the previous epoch's metadata.
STATE_FILES = (KERAS_STATE_FILE, "training_metadata.json")


def local_path(uri: str) -> str:
    """``uri`` as Keras and TensorFlow take it: a ``file://`` URL becomes a plain
    path; other URLs pass through unchanged."""
    return state_mirror.local_path(uri) or uri


def global_step(model: Any) -> int:
    """The optimizer steps ``model`` has taken: its optimizer's ``iterations``."""
    return int(model.optimizer.iterations)


class SigtermFlag:
    """Turns SIGTERM into a flag that the callbacks poll at batch ends.

    The handler only sets the flag: the signal may land in the middle of a
    TensorFlow op or a file write, so the save waits for the next batch end.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def install(self) -> SigtermFlag:
        """Install the handler (main thread only); a no-op when already installed."""
        if not self._installed:
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True
        return self

    def uninstall(self) -> None:
        """Put back the handler that :meth:`install` replaced."""
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


class PreemptibleBackupAndRestore(keras.callbacks.BackupAndRestore):
    """Keras' ``BackupAndRestore`` in a job's checkpoint folder, plus a save on SIGTERM.

    The state (``latest.weights.h5``: weights and optimizer variables, and
    ``training_metadata.json``: the epoch to start from) is written after every
    epoch and kept when training ends, so running a finished job again trains
    no further. A SIGTERM is served at the next batch end: the state is saved,
    ``report_checkpoint(step, uri, "sigterm")`` is written and
    ``model.stop_training`` is set. Keras still runs the cut-short epoch's
    validation and calls ``on_epoch_end`` before ``fit`` returns; this callback
    and :class:`EpochReporter` pass over that epoch.

    Uses ``BackupAndRestore`` internals (``_save_model``, ``_current_epoch``,
    ``_last_batch_seen``, and ``model._initial_epoch`` that it sets): it has no
    public way to save on demand.

    Args:
        checkpoint_dir: a local folder, a ``file://`` URL, or any fsspec URL
            (``gs://``): then the state is written to a local folder, copied
            there after every save and copied back when training begins
            (``state_mirror``: TensorFlow's own GCS client cannot reach it).
        flag: the SIGTERM flag to poll; installed when training begins and
            uninstalled when it ends, unless a SIGTERM came.
    """

    def __init__(self, checkpoint_dir: str, flag: SigtermFlag) -> None:
        self.mirror = state_mirror.MirroredFolder(checkpoint_dir)
        super().__init__(
            str(self.mirror.local),
            save_freq="epoch",
            double_checkpoint=True,
            delete_checkpoint=False,
        )
        self.checkpoint_uri = checkpoint_dir.rstrip("/") + "/" + KERAS_STATE_FILE
        self.flag = flag
        self.stopped_at_step: int | None = None
        self.cut_short_epoch: int | None = None

    @property
    def stopped_by_sigterm(self) -> bool:
        """Whether training stopped early to serve a SIGTERM."""
        return self.stopped_at_step is not None

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.flag.install()
        self.mirror.pull(STATE_FILES)
        before = global_step(self.model)
        super().on_train_begin(logs)
        step = global_step(self.model)
        if step != before:
            epoch = getattr(self.model, "_initial_epoch", None) or 0
            print(f"resumed_from_step={step} epoch={epoch} from {self.checkpoint_uri}", flush=True)
            report_resumed(step, self.checkpoint_uri)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        # BackupAndRestore only advances its epoch at epoch ends: a save inside
        # the first epoch after a resume would otherwise record epoch 0.
        self._current_epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        super().on_train_batch_end(batch, logs)
        if not self.flag.requested or self.stopped_by_sigterm:
            return
        if batch + 1 == self.params.get("steps"):
            return  # the epoch's last batch: its end saves a state that starts the next one
        self._last_batch_seen = batch
        self._stop(f"epoch {self._current_epoch + 1} batch {batch + 1}")
        self.cut_short_epoch = self._current_epoch

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch == self.cut_short_epoch:
            return  # saving here would mark the cut-short epoch done
        super().on_epoch_end(epoch, logs)
        if self.flag.requested and not self.stopped_by_sigterm and epoch + 1 < self._epochs():
            self._stop(f"the end of epoch {epoch + 1}", saved=True)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        super().on_train_end(logs)
        # A preempted VM's shutdown signals every process and the agent passes
        # its notice on too: a second SIGTERM must not kill the process before
        # it exits with its own status.
        if not self.flag.requested:
            self.flag.uninstall()

    def _save_model(self) -> None:
        super()._save_model()
        self.mirror.push(STATE_FILES)

    def _epochs(self) -> int:
        return int(self.params.get("epochs") or 0)

    def _stop(self, where: str, *, saved: bool = False) -> None:
        started = time.perf_counter()
        if not saved:
            self._save_model()
            where += f", saved in {time.perf_counter() - started:.3f}s"
        step = global_step(self.model)
        report_checkpoint(step, self.checkpoint_uri, "sigterm")
        print(f"stopped by SIGTERM at step {step} ({where}): {self.checkpoint_uri}", flush=True)
        self.stopped_at_step = step
        self.model.stop_training = True


class EpochReporter(keras.callbacks.Callback):
    """Calls ``report_epoch`` after each epoch with the epoch's logs as metrics.

    The epoch is reported 1-based, with the ``epochs`` given to ``fit`` and the
    optimizer's ``iterations`` as the step. Give it the
    :class:`PreemptibleBackupAndRestore` of the same ``fit`` to name its
    checkpoint in each report and to skip an epoch that SIGTERM cut short.
    """

    def __init__(self, backup: PreemptibleBackupAndRestore | None = None) -> None:
        super().__init__()
        self.backup = backup

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.backup is not None and epoch == self.backup.cut_short_epoch:
            return
        metrics = {
            name: float(value)
            for name, value in (logs or {}).items()
            if isinstance(value, int | float) or getattr(value, "ndim", None) == 0
        }
        uri = self.backup.checkpoint_uri if self.backup is not None else None
        report_epoch(
            epoch + 1, int(self.params.get("epochs") or 0), global_step(self.model), metrics, uri
        )


def stopped_by_sigterm(callbacks: Iterable[Any]) -> bool:
    """Whether a :class:`PreemptibleBackupAndRestore` in ``callbacks`` stopped ``fit``."""
    return any(
        isinstance(callback, PreemptibleBackupAndRestore) and callback.stopped_by_sigterm
        for callback in callbacks
    )


def exit_code(callbacks: Iterable[Any]) -> int:
    """The trainer's exit status after ``fit``: 143 when SIGTERM stopped it, else 0."""
    return EXIT_PREEMPTED if stopped_by_sigterm(callbacks) else 0


def spotline_callbacks(
    checkpoint_dir: str | None = None,
    output_dir: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flag: SigtermFlag | None = None,
) -> list[Any]:
    """The spotline callbacks for one ``fit``: report, back up, restore, stop on SIGTERM.

    Args:
        checkpoint_dir: where the training state lives; default
            ``SPOTLINE_CHECKPOINT_DIR``. A plain path, a ``file://`` URL, or a
            ``gs://`` (any fsspec) URL, mirrored from a local folder.
        output_dir: TensorBoard logs go to its ``tensorboard`` folder when it
            is local; default ``SPOTLINE_OUTPUT_DIR``. On a spotline VM they
            go to ``SPOTLINE_TENSORBOARD_DIR``, a local folder the agent copies
            to the job's outputs. None when neither is set or the output
            folder is remote, or when the ``tensorboard`` package is missing
            (a line says so).
        env: where to read the defaults; default the process's environment.
        flag: the SIGTERM flag; default a new one, installed now so that a
            notice that comes before ``fit`` starts is not lost. Call from the
            main thread.

    Returns:
        A list with an :class:`EpochReporter`, a :class:`PreemptibleBackupAndRestore`
        and, with an output folder, ``keras.callbacks.TensorBoard``; pass it to
        :func:`exit_code` after ``fit`` for the process's exit status. Keras
        calls every callback's ``on_epoch_end`` for an epoch that SIGTERM cut
        short, so TensorBoard logs that partial epoch, and logs it again when
        the epoch runs in full after the resume.

    Raises:
        ValueError: no checkpoint folder is given or set.
    """
    env = os.environ if env is None else env
    checkpoint_dir = checkpoint_dir or env.get("SPOTLINE_CHECKPOINT_DIR")
    if not checkpoint_dir:
        raise ValueError("no checkpoint folder: pass one or set SPOTLINE_CHECKPOINT_DIR")
    log_dir = _tensorboard_dir(output_dir or env.get("SPOTLINE_OUTPUT_DIR"), env)
    backup = PreemptibleBackupAndRestore(checkpoint_dir, flag or SigtermFlag().install())
    # The reporter comes first: Keras calls callbacks in list order, and an
    # epoch's report should precede a SIGTERM checkpoint taken at its end.
    callbacks: list[Any] = [EpochReporter(backup), backup]
    if log_dir and importlib.util.find_spec("tensorboard") is None:
        # TensorFlow 2.21 no longer depends on it, and tf.summary fails without it.
        print("no TensorBoard logs: the tensorboard package is not installed", flush=True)
    elif log_dir:
        callbacks.append(keras.callbacks.TensorBoard(log_dir=log_dir))
    return callbacks


def _tensorboard_dir(output_dir: str | None, env: Mapping[str, str]) -> str | None:
    """A local folder for TensorBoard's files (tf.summary writes through
    TensorFlow's own file API, which cannot reach a gs:// bucket here)."""
    if env.get("SPOTLINE_TENSORBOARD_DIR"):
        return env["SPOTLINE_TENSORBOARD_DIR"]
    if not output_dir:
        return None
    folder = state_mirror.local_path(output_dir)
    if folder is None:
        print(f"no TensorBoard logs: {output_dir} is not a local folder", flush=True)
        return None
    return folder.rstrip("/") + "/tensorboard"
