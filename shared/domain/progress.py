"""How far a job is and when it should be done, from its epochs' times."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from spotline.shared.domain.documents import EpochDoc, JobDoc
from spotline.shared.domain.states import JobSubstatus


def eta_s(job: JobDoc, epochs: Sequence[EpochDoc], now: datetime) -> float | None:
    """Seconds until the last epoch, at the current attempt's pace: its mean
    epoch time (from when it started training, or its first epoch), times the
    epochs left, less the time already spent on the one under way. None until
    the current attempt has finished an epoch."""
    total = job.spec.epochs
    mine = [e for e in epochs if e.attempt == job.attempt]
    if not mine or job.epoch >= total:
        return None if job.epoch < total else 0.0
    started = _training_since(job) or mine[0].at
    finished = [e for e in mine if e.at >= started]
    done = len(finished) if started != mine[0].at else len(finished) - 1
    if done <= 0:
        return None
    per_epoch = (finished[-1].at - started).total_seconds() / done
    under_way = max(0.0, (now - finished[-1].at).total_seconds())
    return max(0.0, per_epoch * (total - job.epoch) - under_way)


def _training_since(job: JobDoc) -> datetime | None:
    """When the current attempt entered TRAINING (its latest move there: a
    line that notes a loss while it trains on, an elastic gang's replacement
    lost, is no new start)."""
    since = None
    for before, entry in zip([None, *job.history], job.history, strict=False):
        if entry.attempt != job.attempt or entry.substatus != JobSubstatus.TRAINING:
            continue
        if before is None or (before.substatus, before.attempt) != (entry.substatus, entry.attempt):
            since = entry.at
    return since
