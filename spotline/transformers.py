"""A Hugging Face ``Trainer`` that stops at the step on the preemption notice.

Add the callback and resume from the last checkpoint; the rest is the
Trainer as its documentation writes it::

    from spotline.transformers import SpotlineCallback, last_checkpoint

    args = TrainingArguments(output_dir=os.environ["SPOTLINE_CHECKPOINT_DIR"], save_steps=500)
    trainer = Trainer(model=model, args=args, train_dataset=train,
                      callbacks=[SpotlineCallback()])
    trainer.train(resume_from_checkpoint=last_checkpoint(args.output_dir))

On SIGTERM (the notice) the Trainer saves ``checkpoint-<step>`` at the end of
the step it is in and stops; the process then exits with 143, which the agent
reads as "stopped on the notice, state saved". The next attempt starts from
that step: no step is done twice. The callback also reports each epoch with
the Trainer's logged metrics, and the resumed step, to the agent.

Needs the ``hf`` extra: ``pip install -e '.[hf]'`` in a clone (``make hf``),
``pip install 'spotline[hf]'`` from an index.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from spotline import notice
from spotline.notice import EXIT_STOPPED, NoticeFlag, stored_uri
from spotline.report import report_checkpoint, report_epoch, report_resumed

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
except ImportError as missing:
    raise ImportError(
        "spotline.transformers needs transformers and accelerate: "
        "pip install -e '.[hf]' in a clone (make hf), pip install 'spotline[hf]' from an index"
    ) from missing

__all__ = ["EXIT_STOPPED", "SpotlineCallback", "last_checkpoint"]


def last_checkpoint(output_dir: str | os.PathLike[str] | None) -> str | None:
    """The Trainer's newest ``checkpoint-<step>`` folder in ``output_dir``, or
    None when there is none (a first attempt: the folder may not exist yet).
    Give it to ``trainer.train(resume_from_checkpoint=...)``."""
    if output_dir is None or not os.path.isdir(output_dir):
        return None
    found: str | None = get_last_checkpoint(os.fspath(output_dir))
    return found


class SpotlineCallback(TrainerCallback):
    """Save at the step on SIGTERM and stop; report epochs, metrics and the resume.

    Args:
        flag: the SIGTERM flag; default a new one, installed now (from the
            main thread), so that a notice that comes while the model loads
            is kept for the first step. An earlier SIGTERM handler is chained.
        exit_on_notice: after a stop on the notice, end the process with
            :data:`EXIT_STOPPED` (143) when the Trainer's ``train`` returns
            (from its ``on_train_end``), so that code after ``train`` (saving
            the final model, pushing it) runs only when training is done.
            With False, ``train`` returns and :attr:`stopped_on_notice` says so.
        step_time_s: seconds to sleep after every step, simulated compute for
            a demo; default ``step_time_s`` in ``SPOTLINE_HYPERPARAMETERS``.
    """

    def __init__(
        self,
        flag: NoticeFlag | None = None,
        exit_on_notice: bool = True,
        step_time_s: float | None = None,
    ) -> None:
        self.flag = flag or NoticeFlag().install()
        self.exit_on_notice = exit_on_notice
        self.step_time_s = notice.step_time_s() if step_time_s is None else step_time_s
        self.stopped_on_notice = False
        self._metrics: dict[str, float] = {}

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if state.global_step > 0:  # resumed from a checkpoint
            report_resumed(state.global_step, stored_uri(_checkpoint_folder(args, state)))

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        time.sleep(self.step_time_s)
        if self.flag.requested and not self.stopped_on_notice:
            # The Trainer saves when the step's callbacks are done, then stops.
            control.should_save = True
            control.should_training_stop = True
            self.stopped_on_notice = True
            print(f"spotline: SIGTERM, saving at step {state.global_step} and stopping", flush=True)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        for name, value in (logs or {}).items():
            if name != "epoch" and isinstance(value, int | float) and math.isfinite(value):
                self._metrics[name] = float(value)

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self.stopped_on_notice:
            # Saved at the step already: no epoch-end evaluation or second
            # save in the notice's time.
            control.should_save = False
            control.should_evaluate = False
        epoch = state.epoch or 0.0
        if not math.isclose(epoch, round(epoch), abs_tol=1e-6):
            return  # cut short by the notice: the next attempt ends it
        report_epoch(
            round(epoch),
            math.ceil(state.num_train_epochs),
            state.global_step,
            self._metrics,
            stored_uri(str(args.output_dir)),
        )

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self.stopped_on_notice:
            # The local folder: the agent reports the state saved once its
            # mirror has uploaded it, under the storage URL.
            report_checkpoint(state.global_step, _checkpoint_folder(args, state), "sigterm")

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self.stopped_on_notice and self.exit_on_notice:
            raise SystemExit(EXIT_STOPPED)


def _checkpoint_folder(args: TrainingArguments, state: TrainerState) -> str:
    """The folder the Trainer saves the state after ``state.global_step`` in."""
    return os.path.join(str(args.output_dir), f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
