"""Exact-step resume for Keras: what a state records beyond the weights, and
how a resumed ``fit`` passes over the batches the interrupted epoch consumed.

Keras 3's ``BackupAndRestore`` (checked with 3.15) writes the batch of a
mid-epoch save into ``training_metadata.json`` but never reads it back: a
resumed ``fit`` starts the interrupted epoch from its first batch. Here the
state also records how many batches of that epoch were trained, the metric
totals of those batches, and the logs of every finished epoch; a resumed
``fit`` then

1. draws (without training on them) the batches already done from the very
   iterator Keras made for the epoch, so the rest of the epoch meets the same
   batches in the same order as a run never stopped. That holds as long as
   the epoch's order does not depend on how many epochs this process has
   run: NumPy arrays (Keras on TensorFlow makes the same seeded permutation
   for every epoch), a ``tf.data`` dataset that is not shuffled or shuffled
   with ``reshuffle_each_iteration=False``, or a ``PyDataset`` whose order is
   a function of its epoch;
2. puts back the metric totals after Keras resets them at the epoch's start,
   so the epoch's logs are those of the whole epoch;
3. puts the earlier epochs' logs back into ``history`` and leaves the epoch
   that a SIGTERM cut short out of it: ``history`` ends with one entry per
   epoch, whichever attempt trained it.

No TensorFlow import: the model is handled through the methods Keras gives it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ResumePoint:
    """Where a saved state stands.

    ``epoch`` is Keras' own field (0-based: the epoch ``fit`` starts from) and
    ``batch`` too (the last batch seen, 0-based); ``batches_done`` is how many
    batches of ``epoch`` the weights include (0 at an epoch end).
    """

    epoch: int
    batches_done: int = 0
    step: int = 0
    metrics: list[Any] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(
            {
                "epoch": self.epoch,
                "batch": max(self.batches_done - 1, 0),
                "batches_done": self.batches_done,
                "step": self.step,
                "metrics": self.metrics,
                "history": self.history,
            }
        )

    @classmethod
    def read(cls, path: Path) -> ResumePoint | None:
        """The point saved at ``path``; None when there is none. A file that
        Keras' own ``BackupAndRestore`` wrote (epoch and batch only) resumes
        at the start of its epoch, as Keras would."""
        if not path.is_file():
            return None
        saved = json.loads(path.read_text())
        return cls(
            epoch=int(saved["epoch"]),
            batches_done=int(saved.get("batches_done", 0)),
            step=int(saved.get("step", 0)),
            metrics=list(saved.get("metrics", [])),
            history=list(saved.get("history", [])),
        )

    def write(self, path: Path) -> None:
        """Write through a temporary name and a rename: a process killed in
        the middle leaves the previous point, never half of one."""
        partial = path.with_name(path.name + ".partial")
        partial.write_text(self.to_json())
        os.replace(partial, path)


def epoch_logs(logs: dict[str, Any] | None) -> dict[str, float]:
    """The scalar values of an epoch's logs, as JSON can hold them."""
    return {
        name: float(value)
        for name, value in (logs or {}).items()
        if isinstance(value, int | float) or getattr(value, "ndim", None) == 0
    }


def metric_totals(model: Any) -> list[Any]:
    """The running totals of ``model``'s metrics (loss included) as lists."""
    return [variable.numpy().tolist() for variable in model.metrics_variables]


def restore_metric_totals(model: Any, totals: list[Any]) -> None:
    """Put back totals saved by :func:`metric_totals` for the same model."""
    variables = list(model.metrics_variables)
    if len(variables) != len(totals):
        raise ValueError(
            f"the saved state has {len(totals)} metric variables, the model "
            f"{len(variables)}: was it saved with other metrics?"
        )
    for variable, value in zip(variables, totals, strict=True):
        variable.assign(value)


class BatchSkipper:
    """Stands in for ``model.train_function`` until ``count`` batches are drawn.

    Keras calls ``model.train_function(iterator)`` once per step (of
    ``steps_per_execution`` batches) with the epoch's iterator; this one draws
    the step's batches and trains on nothing. After the last of them it puts
    back the metric totals saved with the state (Keras reset them when the
    epoch began) and gives the real function back. The callbacks still see
    each skipped batch end, with the batch numbers of the run never stopped.

    Args:
        model: the model being fitted, its ``train_function`` already made.
        count: the batches to draw.
        totals: what :func:`metric_totals` saved after those batches; none
            leaves the metrics as Keras reset them.
    """

    def __init__(self, model: Any, count: int, totals: list[Any] | None = None) -> None:
        self.model = model
        self.remaining = count
        self.totals = totals or []
        self.original: Callable[[Any], Any] = model.train_function
        if count > 0:
            model.train_function = self

    @property
    def active(self) -> bool:
        return self.remaining > 0

    def __call__(self, iterator: Any) -> Any:
        per_call = int(getattr(self.model, "steps_per_execution", 1) or 1)
        draw = getattr(iterator, "get_next", None) or (lambda: next(iterator))
        for _ in range(min(per_call, self.remaining)):
            batch = draw()
        # Keras on TensorFlow builds the compiled metrics when it first traces
        # a train step, which has not happened yet: build them from the batch's
        # shapes (a no-op once built), as its other backends do before fit.
        self.model._symbolic_build(data_batch=batch)
        self.remaining -= per_call
        if self.remaining <= 0:
            if self.totals:
                restore_metric_totals(self.model, self.totals)
            self.release()
        return self.model.get_metrics_result()

    def release(self) -> None:
        """Give ``model.train_function`` back (a no-op once given back)."""
        if self.model.train_function is self:
            self.model.train_function = self.original
        self.remaining = 0


def merge_history(history: Any, epochs: list[dict[str, Any]]) -> None:
    """Make a ``keras.callbacks.History`` hold ``epochs``, the logs of epochs
    ``0 .. len(epochs) - 1`` whichever attempt trained them, as ``History``
    itself would have recorded them (a name missing from an epoch's logs, as
    ``val_*`` with ``validation_freq``, has no value for that epoch)."""
    history.epoch = list(range(len(epochs)))
    merged: dict[str, list[Any]] = {}
    for logs in epochs:
        for name, value in logs.items():
            merged.setdefault(name, []).append(value)
    history.history = merged
