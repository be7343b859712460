"""The Keras callback that backs a ``fit`` up, restores it at the exact step,
and saves on SIGTERM (the Spot preemption notice).

Builds on Keras 3's ``BackupAndRestore`` (checked with 3.15) for the weights
file, its previous copy (``.bkp``, taken before each save and used when the
newest one cannot be read) and the weights' restore; owns the metadata (see
``keras_resume``) and the mid-epoch resume Keras lacks. Uses its internals
(``_load_model``, ``_save_model``, ``model._initial_epoch``): it has no public
way to save on demand.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

import keras

from spotline.notice import NoticeFlag
from spotline.report import report_checkpoint, report_resumed
from spotline.vm_image.trainers import state_mirror
from spotline.vm_image.trainers.checkpoint_files import KERAS_STATE_FILE
from spotline.vm_image.trainers.keras_resume import (
    BatchSkipper,
    ResumePoint,
    epoch_logs,
    merge_history,
    metric_totals,
)

METADATA_FILE = "training_metadata.json"
# What one state is, the file that says where it stands last: a copy cut
# short leaves the previous state's metadata.
STATE_FILES = (KERAS_STATE_FILE, METADATA_FILE)


def global_step(model: Any) -> int:
    """The optimizer steps ``model`` has taken: its optimizer's ``iterations``."""
    return int(model.optimizer.iterations)


# SIGTERM as a flag the callbacks poll at batch ends (the signal may land in
# the middle of a TensorFlow op or a file write): the one spotline.notice
# holds for every framework, which also calls a handler installed before it.
SigtermFlag = NoticeFlag


class PreemptibleBackupAndRestore(keras.callbacks.BackupAndRestore):
    """Back up after every epoch and on SIGTERM; resume at the saved batch.

    The state (``latest.weights.h5``: weights and optimizer variables, and
    ``training_metadata.json``: where it stands, see ``keras_resume``) is kept
    when training ends. A SIGTERM is served at the next batch end: the state
    is saved, ``report_checkpoint(step, uri, "sigterm")`` is written and
    ``model.stop_training`` is set. Keras still runs the cut-short epoch's
    validation and calls ``on_epoch_end`` before ``fit`` returns; this callback
    and ``EpochReporter`` pass over that epoch, and ``history`` drops it.

    Args:
        checkpoint_dir: a local folder, a ``file://`` URL, or any fsspec URL
            (``gs://``): then the state is written to a local folder, copied
            there after every save and copied back when training begins
            (``state_mirror``: TensorFlow's own GCS client cannot reach it).
        flag: the SIGTERM flag to poll; installed when training begins and
            uninstalled when it ends, unless a SIGTERM came.
        history: the ``keras.callbacks.History`` of the same ``fit``, made to
            hold one entry per epoch (earlier attempts' included).
        step_time_s: seconds to sleep after every batch: simulated compute,
            so that a demo can land a preemption mid-epoch.
    """

    def __init__(
        self,
        checkpoint_dir: str,
        flag: SigtermFlag,
        history: keras.callbacks.History | None = None,
        step_time_s: float = 0.0,
    ) -> None:
        self.mirror = state_mirror.MirroredFolder(checkpoint_dir)
        super().__init__(
            str(self.mirror.local),
            save_freq="epoch",
            double_checkpoint=True,
            delete_checkpoint=False,
        )
        self.checkpoint_uri = checkpoint_dir.rstrip("/") + "/" + KERAS_STATE_FILE
        self.flag = flag
        self.history = history
        self.step_time_s = step_time_s
        self.stopped_at_step: int | None = None
        self.cut_short_epoch: int | None = None
        self.resumed: ResumePoint | None = None
        self._epoch_logs: list[dict[str, float]] = []
        self._ran_logs: dict[int, dict[str, Any]] = {}
        self._skipper: BatchSkipper | None = None
        self._save_took_s = 0.0

    @property
    def stopped_by_sigterm(self) -> bool:
        """Whether training stopped early to serve a SIGTERM."""
        return self.stopped_at_step is not None

    def clear(self) -> None:
        """Delete the saved state here and in storage: the next ``fit`` starts fresh."""
        names = [*STATE_FILES, *(f"{name}.bkp" for name in STATE_FILES)]
        for name in names:
            Path(self.mirror.local, name).unlink(missing_ok=True)
        self.mirror.remove(names)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.flag.install()
        self.mirror.pull(STATE_FILES)
        self.resumed = None
        super().on_train_begin(logs)  # loads the weights, calls _load_model
        point = self.resumed
        self._ran_logs = {}
        self._epoch_logs = list(point.history[: point.epoch]) if point else []
        if point is None:
            return
        epochs = self._epochs()
        step = global_step(self.model)
        if point.epoch >= epochs:
            print(
                f"!!! spotline: {self.checkpoint_uri} already holds {point.epoch} epochs "
                f"(step {step}), fit asks for {epochs}: nothing is trained. To start "
                "fresh: spotline_callbacks(fresh=True), SPOTLINE_FRESH=1, or another "
                "checkpoint folder !!!",
                file=sys.stderr,
                flush=True,
            )
        else:
            print(
                f"resumed_from_step={step} epoch={point.epoch + 1}/{epochs} "
                f"batches_done={point.batches_done} from {self.checkpoint_uri}",
                flush=True,
            )
        report_resumed(step, self.checkpoint_uri)
        if point.batches_done and point.epoch < epochs:
            self._skipper = BatchSkipper(self.model, point.batches_done, point.metrics)

    def _load_model(self) -> None:
        super()._load_model()
        self.resumed = ResumePoint.read(Path(self.mirror.local, METADATA_FILE))

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._current_epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._skipper is not None and (self._skipper.active or batch == self._last_skipped()):
            return  # a batch done before the save: nothing trained, nothing to save
        self._skipper = None
        if self.step_time_s:
            time.sleep(self.step_time_s)
        if not self.flag.requested or self.stopped_by_sigterm:
            return
        if batch + 1 == self.params.get("steps"):
            return  # the epoch's last batch: its end saves a state that starts the next one
        self._save_model(batches_done=batch + 1)
        self._stop(f"epoch {self._current_epoch + 1} batch {batch + 1}")
        self.cut_short_epoch = self._current_epoch

    def _last_skipped(self) -> int:
        return (self.resumed.batches_done - 1) if self.resumed else -1

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch == self.cut_short_epoch:
            return  # saving here would mark the cut-short epoch done
        self._epoch_logs = [*self._epoch_logs[:epoch], epoch_logs(logs)]
        self._ran_logs[epoch] = dict(logs or {})
        self._current_epoch = epoch + 1
        self._save_model()
        if self.flag.requested and not self.stopped_by_sigterm and epoch + 1 < self._epochs():
            self._stop(f"the end of epoch {epoch + 1}")

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._skipper is not None:
            self._skipper.release()
        if self.history is not None:
            # Keras' own values for the epochs this fit ran, the saved ones before.
            merged = [self._ran_logs.get(e, saved) for e, saved in enumerate(self._epoch_logs)]
            merge_history(self.history, merged)
            self.model.history = self.history
        # A preempted VM's shutdown signals every process and the agent passes
        # its notice on too: a second SIGTERM must not kill the process before
        # it exits with its own status.
        if not self.flag.requested:
            self.flag.uninstall()

    def _save_model(self, batches_done: int = 0) -> None:
        """Save the weights, then the point they stand at (the previous pair
        kept as ``.bkp``), and copy both to storage, the weights first."""
        started = time.perf_counter()
        local = self.mirror.local
        local.mkdir(parents=True, exist_ok=True)
        weights, metadata = local / KERAS_STATE_FILE, local / METADATA_FILE
        for path in (weights, metadata):
            if path.exists():
                shutil.copyfile(path, f"{path}.bkp")
        self.model.save_weights(filepath=str(weights), overwrite=True)
        ResumePoint(
            epoch=self._current_epoch,
            batches_done=batches_done,
            step=global_step(self.model),
            metrics=metric_totals(self.model) if batches_done else [],
            history=self._epoch_logs,
        ).write(metadata)
        self.mirror.push(STATE_FILES)
        self._save_took_s = time.perf_counter() - started

    def _epochs(self) -> int:
        return int(self.params.get("epochs") or 0)

    def _stop(self, where: str) -> None:
        step = global_step(self.model)
        report_checkpoint(step, self.checkpoint_uri, "sigterm")
        print(
            f"stopped by SIGTERM at step {step} ({where}, saved in {self._save_took_s:.3f}s): "
            f"{self.checkpoint_uri}",
            flush=True,
        )
        self.stopped_at_step = step
        self.model.stop_training = True
