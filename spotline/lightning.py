"""A Lightning ``Trainer`` that saves at the step on the preemption notice.

Add the callback beside your ``ModelCheckpoint`` and resume from the newest
checkpoint; the rest is Lightning as its documentation writes it::

    from spotline.lightning import SpotlineCallback, last_checkpoint

    dirpath = os.environ["SPOTLINE_CHECKPOINT_DIR"]
    checkpoint = ModelCheckpoint(dirpath=dirpath, every_n_train_steps=500)
    trainer = L.Trainer(max_epochs=10, callbacks=[checkpoint, SpotlineCallback()])
    trainer.fit(model, train_loader, ckpt_path=last_checkpoint(dirpath))

Lightning already turns SIGTERM (the notice) into a stop at the end of the
step it is in: its signal handler sets ``trainer.received_sigterm`` (calling
any handler installed before it) and its loop raises ``SIGTERMException``.
The callback does not replace that handler; it serves the exception: it
saves ``last.ckpt`` in the ``ModelCheckpoint``'s folder at that step and sets
the exit status to 143, which the agent reads as "stopped on the notice,
state saved" (Lightning's own exit after a SIGTERM is 0). The next attempt
starts from that step: no step is done twice. It also reports each epoch with
the logged metrics, and the resumed step, to the agent.

To resume in the middle of an epoch with the batches not yet trained (and so
end with the weights of a run never stopped), the loader must be resumable:
torchdata's ``StatefulDataLoader`` in place of ``DataLoader`` (Lightning saves
its position in the checkpoint). A plain ``DataLoader`` starts the
interrupted epoch's batches over, and Lightning warns.

Needs the ``lightning`` extra: ``pip install -e '.[lightning]'`` in a clone
(``make lightning``), ``pip install 'spotline[lightning]'`` from an index.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import re
import time
from pathlib import Path
from typing import Any

import torch

from spotline import notice
from spotline.notice import EXIT_STOPPED, stored_uri
from spotline.report import report_checkpoint, report_epoch, report_resumed
from spotline.torch import capture_rng_state, restore_rng_state

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.utilities.exceptions import SIGTERMException
except ImportError as missing:
    raise ImportError(
        "spotline.lightning needs Lightning: pip install -e '.[lightning]' in a clone "
        "(make lightning), pip install 'spotline[lightning]' from an index"
    ) from missing

__all__ = ["EXIT_STOPPED", "SpotlineCallback", "last_checkpoint"]

log = logging.getLogger(__name__)

_STEP_IN_NAME = re.compile(r"step=(\d+)")


def last_checkpoint(dirpath: str | os.PathLike[str] | None) -> str | None:
    """The ``.ckpt`` file in ``dirpath`` with the most training steps, or None
    when there is none (a first attempt: the folder may not exist yet). Give
    it to ``trainer.fit(..., ckpt_path=...)``.

    Steps, not modification times (what ``ckpt_path="last"`` compares): a
    folder restored from storage on a new VM has the times of the copy. The
    step is read from the name (``ModelCheckpoint``'s ``step=N``), else from
    the file; a file that cannot be read (cut short) is skipped.
    """
    if dirpath is None or not os.path.isdir(dirpath):
        return None
    best: tuple[int, int, str] | None = None
    for path in Path(dirpath).glob("*.ckpt"):
        step = _steps_in(path)
        if step is None:
            continue
        # On a tie the file named last* wins: the newest save of that state.
        key = (step, int(path.name.startswith("last")), str(path))
        best = key if best is None or key > best else best
    return None if best is None else best[2]


def _steps_in(path: Path) -> int | None:
    named = _STEP_IN_NAME.search(path.name)
    if named:
        return int(named.group(1))
    try:
        # mmap: only the pages holding the step are read, not the weights.
        # weights_only=False: a Lightning checkpoint may pickle hyperparameters;
        # only the job's own folder is read.
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
        return int(state["global_step"])
    except (EOFError, KeyError, OSError, RuntimeError, ValueError, pickle.UnpicklingError) as err:
        log.warning("skipping unreadable checkpoint %s: %s", path, err)
        return None


class SpotlineCallback(pl.Callback):
    """Save ``last.ckpt`` at the step on SIGTERM and exit 143; report epochs,
    metrics and the resume.

    Args:
        dirpath: where the notice's checkpoint goes; default the trainer's
            ``ModelCheckpoint`` folder, else ``SPOTLINE_CHECKPOINT_DIR``, else
            ``default_root_dir/checkpoints``.
        filename: its name, without ``.ckpt``.
        step_time_s: seconds to sleep after every step, simulated compute for
            a demo; default ``step_time_s`` in ``SPOTLINE_HYPERPARAMETERS``.
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str = "last",
        step_time_s: float | None = None,
    ) -> None:
        super().__init__()
        self.step_time_s = notice.step_time_s() if step_time_s is None else step_time_s
        if not filename:
            raise ValueError("filename must not be empty: the notice's checkpoint needs a name")
        self.dirpath = None if dirpath is None else os.fspath(dirpath)
        self.filename = filename
        self.stopped_on_notice = False
        self._processes = 1
        self._rng_to_restore: dict[str, Any] | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._processes = trainer.world_size

    def state_dict(self) -> dict[str, Any]:
        """The random number generators' states, in every checkpoint: Lightning
        saves none, and a resumed run would draw other dropout masks (and
        end with other weights) than a run never stopped."""
        # Tensors and plain values only (numpy's key as a tensor): Lightning
        # loads checkpoints with weights_only=True, which refuses numpy arrays.
        return {"rng": capture_rng_state(), "processes": self._processes}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # One process's state: several ranks would all take rank 0's.
        if state_dict.get("processes") != 1 or self._processes != 1 or "rng" not in state_dict:
            return
        self._rng_to_restore = dict(state_dict["rng"])

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # Restored here, not when the checkpoint loads: starting the loader's
        # iterator in between draws from the global generator.
        if self._rng_to_restore is not None:
            restore_rng_state(self._rng_to_restore)
            self._rng_to_restore = None

    def checkpoint_dir(self, trainer: pl.Trainer) -> str:
        """The folder the notice's checkpoint is saved in."""
        if self.dirpath:
            return self.dirpath
        callback = trainer.checkpoint_callback
        if isinstance(callback, ModelCheckpoint) and callback.dirpath:
            return str(callback.dirpath)
        return os.environ.get("SPOTLINE_CHECKPOINT_DIR") or os.path.join(
            trainer.default_root_dir, "checkpoints"
        )

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.ckpt_path and trainer.global_step > 0:
            report_resumed(trainer.global_step, stored_uri(trainer.ckpt_path))

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, *_: Any
    ) -> None:
        time.sleep(self.step_time_s)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        report_epoch(
            trainer.current_epoch + 1,
            _epochs(trainer),
            trainer.global_step,
            _scalars(trainer.callback_metrics),
            stored_uri(self.checkpoint_dir(trainer)),
        )

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        # Lightning raises SIGTERMException where a step (or a validation
        # batch) has ended: the state is whole, and the notice's time is short.
        if not isinstance(exception, SIGTERMException):
            return
        path = os.path.join(self.checkpoint_dir(trainer), f"{self.filename}.ckpt")
        trainer.save_checkpoint(path)
        self.stopped_on_notice = True
        if trainer.is_global_zero:
            # The local path: the agent reports the state saved once its
            # mirror has uploaded it, under the storage URL.
            report_checkpoint(trainer.global_step, path, "sigterm")
            print(f"spotline: SIGTERM, saved {path} at step {trainer.global_step}", flush=True)
        # Lightning re-raises it; a SystemExit with no code would exit 0.
        exception.code = EXIT_STOPPED


def _epochs(trainer: pl.Trainer) -> int:
    """How many epochs the run has: ``max_epochs``, or those ``max_steps`` span."""
    if trainer.max_epochs is not None and trainer.max_epochs > 0:
        return trainer.max_epochs
    batches = trainer.num_training_batches
    if trainer.max_steps > 0 and batches and math.isfinite(batches):
        return math.ceil(trainer.max_steps * trainer.accumulate_grad_batches / batches)
    return trainer.current_epoch + 1


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The logged metrics that are one finite number each."""
    found = {}
    for name, value in metrics.items():
        number = value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
        if isinstance(number, int | float) and math.isfinite(number):
            found[name] = float(number)
    return found
