"""The callbacks behind ``spotline.keras``: see that package for their use."""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

from spotline.report import report_epoch
from spotline.vm_image.trainers import state_mirror

try:
    import keras
except ImportError as missing:
    raise ImportError(
        "spotline.keras needs TensorFlow: "
        "pip install -e '.[tensorflow]' in a clone (make tensorflow), "
        "pip install 'spotline[tensorflow]' from an index"
    ) from missing

from spotline.vm_image.trainers.keras_backup import (
    STATE_FILES,
    PreemptibleBackupAndRestore,
    SigtermFlag,
    global_step,
)
from spotline.vm_image.trainers.keras_resume import epoch_logs

__all__ = [
    "EXIT_PREEMPTED",
    "STATE_FILES",
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
FRESH_ENV = "SPOTLINE_FRESH"
_said_outside = False


def local_path(uri: str) -> str:
    """``uri`` as Keras and TensorFlow take it: a ``file://`` URL becomes a plain
    path; other URLs pass through unchanged."""
    return state_mirror.local_path(uri) or uri


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
        metrics = epoch_logs(logs)
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
    fresh: bool | None = None,
    step_time_s: float | None = None,
) -> list[Any]:
    """The spotline callbacks for one ``fit``: report, back up, restore, stop on SIGTERM.

    Args:
        checkpoint_dir: where the training state lives; default
            ``SPOTLINE_CHECKPOINT_URL``, and without it (outside spotline) a
            new temporary folder. A plain path, a ``file://`` URL, or a
            ``gs://`` (any fsspec) URL, mirrored from a local folder.
        output_dir: TensorBoard logs go to its ``tensorboard`` folder when it
            is local; default ``SPOTLINE_OUTPUT_URL``. On a spotline VM they
            go to ``SPOTLINE_TENSORBOARD_DIR``, a local folder the agent copies
            to the job's outputs. None when neither is set or the output
            folder is remote, or when the ``tensorboard`` package is missing
            (a line says so).
        env: where to read the defaults; default the process's environment.
        flag: the SIGTERM flag; default a new one, installed now so that a
            notice that comes before ``fit`` starts is not lost. Call from the
            main thread.
        fresh: delete the state in the checkpoint folder first, so that
            ``fit`` starts from scratch; default ``SPOTLINE_FRESH=1``. Never on
            a spotline VM: every attempt would start over.
        step_time_s: seconds to sleep after every batch, simulated compute for
            a demo; default ``step_time_s`` in ``SPOTLINE_HYPERPARAMETERS``, as
            the built-in trainers read it.

    Returns:
        A list with an :class:`EpochReporter`, a :class:`PreemptibleBackupAndRestore`,
        the ``keras.callbacks.History`` that ``fit`` returns and, with an
        output folder, ``keras.callbacks.TensorBoard``; pass it to
        :func:`exit_code` after ``fit`` for the process's exit status. Keras
        calls every callback's ``on_epoch_end`` for an epoch that SIGTERM cut
        short, so TensorBoard logs that partial epoch.

    Raises:
        ValueError: ``step_time_s`` is negative or not a number.
    """
    env = os.environ if env is None else env
    checkpoint_dir = checkpoint_dir or env.get("SPOTLINE_CHECKPOINT_URL") or _outside_spotline()
    if fresh is None:
        fresh = env.get(FRESH_ENV, "") not in ("", "0")
    if step_time_s is None:
        step_time_s = _step_time_s(env)
    if not step_time_s >= 0:
        raise ValueError(f"step_time_s must be a number of seconds >= 0, not {step_time_s!r}")
    log_dir = _tensorboard_dir(output_dir or env.get("SPOTLINE_OUTPUT_URL"), env)
    history = keras.callbacks.History()
    backup = PreemptibleBackupAndRestore(
        checkpoint_dir, flag or SigtermFlag().install(), history, step_time_s
    )
    if fresh:
        backup.clear()
        print(f"starting fresh: deleted the training state in {checkpoint_dir}", flush=True)
    # The reporter comes first: Keras calls callbacks in list order, and an
    # epoch's report should precede a SIGTERM checkpoint taken at its end.
    callbacks: list[Any] = [EpochReporter(backup), backup, history]
    if log_dir and importlib.util.find_spec("tensorboard") is None:
        # TensorFlow 2.21 no longer depends on it, and tf.summary fails without it.
        print("no TensorBoard logs: the tensorboard package is not installed", flush=True)
    elif log_dir:
        callbacks.append(keras.callbacks.TensorBoard(log_dir=log_dir))
    return callbacks


def _outside_spotline() -> str:
    """A new temporary checkpoint folder, said once per process."""
    global _said_outside
    folder = tempfile.mkdtemp(prefix="spotline-keras-")
    if not _said_outside:
        _said_outside = True
        print(
            f"spotline: not on a spotline VM (no SPOTLINE_CHECKPOINT_URL): training "
            f"here, state in {folder}, epoch reports on standard output",
            flush=True,
        )
    return folder


def _step_time_s(env: Mapping[str, str]) -> float:
    try:
        hyper = json.loads(env.get("SPOTLINE_HYPERPARAMETERS") or "{}")
        value = hyper.get("step_time_s", 0.0) if isinstance(hyper, dict) else 0.0
        return float(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"SPOTLINE_HYPERPARAMETERS step_time_s: {error}") from None


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
