"""Where a Spot run's makespan goes beyond an on-demand run's: each stop (a
preemption that took the job's VMs) costs the time to hear of it, the time
spotline waits for the lost VMs to be deleted, any wait before the
replacement is asked for (quota, capacity, the reaper's tick), the
replacement's boot, and the training redone."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TypeVar

T = TypeVar("T")


@dataclass
class Stop:
    """One preemption that stopped an attempt, in simulated seconds.

    Attributes:
        attempt: the attempt it stopped; ``node``: the node it hit.
        hit_s: the notice; ``started_s``: the attempt's insert.
        trained_s: how long the attempt had trained (None: hit while booting).
        lost_work_s: training progress the stop lost (not saved).
        recorded_s: when spotline recorded the loss (the report handled).
        teardown_s: what the delivery recording it waited for deletes.
    """

    attempt: int
    node: int
    hit_s: float
    started_s: float
    trained_s: float | None = None
    lost_work_s: float = 0.0
    recorded_s: float | None = None
    teardown_s: float = 0.0


@dataclass(frozen=True)
class Breakdown:
    """Seconds of makespan beyond an on-demand run, by cause, summed over stops.

    Attributes:
        stops: preemptions that stopped an attempt.
        detection_s: notice -> the loss recorded (checkpoint, report, delivery).
        teardown_s: the lost VMs' deletes spotline waited for before placing
            (none since it inserts the replacement first).
        placement_s: any further wait before the replacement was inserted.
        boot_s: boots beyond the one every run has (cut short ones included).
        lost_work_s: training redone.
    """

    stops: int = 0
    detection_s: float = 0.0
    teardown_s: float = 0.0
    placement_s: float = 0.0
    boot_s: float = 0.0
    lost_work_s: float = 0.0

    @property
    def total_s(self) -> float:
        causes = (self.detection_s, self.teardown_s, self.placement_s, self.boot_s)
        return sum(causes) + self.lost_work_s

    @staticmethod
    def mean(parts: Sequence[Breakdown]) -> Breakdown:
        return field_means(Breakdown, parts)


def field_means(cls: type[T], parts: Sequence[T]) -> T:
    """The dataclass ``cls`` whose every field is the mean of that field
    over ``parts`` (none: ``cls()``, its defaults)."""
    if not parts:
        return cls()
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    return cls(**{n: statistics.fmean(getattr(p, n) for p in parts) for n in names})


def breakdown(
    stops: Iterable[Stop],
    started: Mapping[int, float],
    train_start: Mapping[int, float | None],
    boot_s: float,
) -> Breakdown:
    """Sum the stops of one run.

    Args:
        started: each attempt's insert; ``train_start``: its training start
            (None: it never trained).
        boot_s: the one boot an on-demand run also has.
    """
    by_attempt = {stop.attempt: stop for stop in stops}
    detection = teardown = placement = lost = 0.0
    for stop in by_attempt.values():
        lost += stop.lost_work_s
        if stop.recorded_s is None:
            continue
        detection += stop.recorded_s - stop.hit_s
        following = started.get(stop.attempt + 1)
        if following is None:
            teardown += stop.teardown_s
            continue
        # Only the deletes waited for before the next insert delayed it
        # (spotline now inserts first, and deletes while the new VMs boot).
        waited = min(stop.teardown_s, max(0.0, following - stop.recorded_s))
        teardown += waited
        placement += max(0.0, following - stop.recorded_s - waited)
    boots = 0.0
    for number, start in started.items():
        trained = train_start.get(number)
        ended = by_attempt.get(number)
        if trained is not None:
            boots += trained - start
        elif ended is not None:
            boots += ended.hit_s - start
    return Breakdown(
        stops=len(by_attempt),
        detection_s=detection,
        teardown_s=teardown,
        placement_s=placement,
        boot_s=max(0.0, boots - boot_s),
        lost_work_s=lost,
    )
