"""Where a job's time went: timeline phases, per attempt and in total.

Aibro's ``plot_timeline`` splits a job into requesting the server,
connecting, gearing up, sending model and data, training and returning.
spotline adds its own: waiting for capacity or quota, preempted (the VM lost,
until the next request), waiting for a replacement node (a gang's survivors,
idle but billed, while its one lost node is replaced) and recovering (a later
attempt's way back to training: requesting, connecting, gearing up, sending
again).

A phase starts at a history line and lasts until the next one. History lines
are in the order they were written; the VM's own times stamp its steps, so a
skewed clock can make a line earlier than the one before: such a phase counts
zero, never negative. The phase a job is in now counts up to ``now`` when one
is given, and not at all otherwise (what is written onto the job document:
only phases that have ended, so the numbers there never go stale).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from spotline.shared.domain.documents import HistoryEntry
from spotline.shared.domain.states import JobSubstatus


class Phase(StrEnum):
    """The timeline's phases, in the order a job meets them."""

    REQUESTING = "requesting the server"
    WAITING_FOR_CAPACITY = "waiting for capacity"
    WAITING_FOR_QUOTA = "waiting for quota"
    CONNECTING = "connecting"
    GEARING_UP = "gearing up"
    SENDING = "sending model and data"
    INSTALLING = "installing requirements"
    TRAINING = "training"
    RETURNING = "returning"
    PREEMPTED = "preempted"
    # A gang's surviving nodes idle (and billed) while one lost node is replaced.
    WAITING_FOR_NODE = "waiting for a replacement node"
    RECOVERING = "recovering"

    @property
    def key(self) -> str:
        """Its name as a Firestore field: ``waiting_for_capacity``."""
        return self.name.lower()


S = JobSubstatus
_OF_SUBSTATUS = {
    S.REQUESTING_SERVER: Phase.REQUESTING,
    S.WAITING_FOR_CAPACITY: Phase.WAITING_FOR_CAPACITY,
    S.WAITING_FOR_QUOTA: Phase.WAITING_FOR_QUOTA,
    S.CONNECTING_SERVER: Phase.CONNECTING,
    S.GEARING_UP_ENV: Phase.GEARING_UP,
    S.SENDING_MODEL_AND_DATA: Phase.SENDING,
    S.INSTALLING_REQUIREMENTS: Phase.INSTALLING,
    S.TRAINING: Phase.TRAINING,
    S.RETURNING: Phase.RETURNING,
    S.PREEMPTED: Phase.PREEMPTED,
    S.STALLED: Phase.PREEMPTED,
    S.REPLACING_NODE: Phase.WAITING_FOR_NODE,
}
# The steps before training: on a later attempt they are the way back.
_SETUP = frozenset(
    {Phase.REQUESTING, Phase.CONNECTING, Phase.GEARING_UP, Phase.SENDING, Phase.INSTALLING}
)


@dataclass(frozen=True)
class Segment:
    """One stretch of one phase of one attempt."""

    attempt: int
    phase: Phase
    start: datetime
    seconds: float
    ongoing: bool = False


@dataclass(frozen=True)
class Timeline:
    segments: tuple[Segment, ...]

    def by_attempt(self, grouped: bool = False) -> dict[int, dict[Phase, float]]:
        """Seconds per phase, per attempt: each attempt's own steps, or with
        ``grouped`` the same partition as ``totals`` (a later attempt's steps
        before training as recovering), so each phase's attempts add up to its total."""
        found: dict[int, dict[Phase, float]] = {}
        for segment in self.segments:
            phase = _grouped(segment) if grouped else segment.phase
            phases = found.setdefault(segment.attempt, {})
            phases[phase] = phases.get(phase, 0.0) + segment.seconds
        return found

    def totals(self) -> dict[Phase, float]:
        """Seconds per phase over the whole job, a partition of its time: a
        later attempt's steps before training count as recovering."""
        found: dict[Phase, float] = {}
        for segment in self.segments:
            phase = _grouped(segment)
            found[phase] = found.get(phase, 0.0) + segment.seconds
        return {phase: found[phase] for phase in Phase if phase in found}

    @property
    def seconds(self) -> float:
        return sum(segment.seconds for segment in self.segments)


def timeline(history: Sequence[HistoryEntry], now: datetime | None = None) -> Timeline:
    """The job's phases from its history; the current one up to ``now`` if given."""
    segments = []
    for entry, following in zip(history, [*history[1:], None], strict=True):
        phase = _phase(entry)
        if phase is None:
            continue  # an ending: the job's time stops there
        if following is not None:
            end, ongoing = following.at, False
        elif now is not None:
            end, ongoing = now, True
        else:
            continue
        seconds = max(0.0, (end - entry.at).total_seconds())
        segments.append(Segment(entry.attempt or 1, phase, entry.at, seconds, ongoing))
    return Timeline(tuple(segments))


def phase_seconds(history: Sequence[HistoryEntry]) -> dict[str, float]:
    """The totals of the phases that have ended, keyed for a Firestore field
    (``jobs/{id}.phase_seconds``), rounded to milliseconds."""
    totals = timeline(history).totals()
    return {phase.key: round(seconds, 3) for phase, seconds in totals.items()}


def _grouped(segment: Segment) -> Phase:
    if segment.attempt > 1 and segment.phase in _SETUP:
        return Phase.RECOVERING
    return segment.phase


def _phase(entry: HistoryEntry) -> Phase | None:
    try:
        substatus = JobSubstatus(entry.substatus) if entry.substatus else None
    except ValueError:
        return None
    return _OF_SUBSTATUS.get(substatus) if substatus else None
