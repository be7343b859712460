"""Which machine option a job waiting for capacity asks for now:
``wait_request_s``.

Aibro's ``online_fit`` requests ``machine_ids[0]`` and, if it has
no capacity within ``wait_request_s``, ``machine_ids[1]`` next, and so on.
Here the option is a pure function of when the attempt began to wait
(``QueueEntry.waiting_since``) and the time now: a redelivered submission, a
late retry or two reaper ticks at one moment all ask for the same option, and
there is no counter to keep in step. ``wait_total_s`` (default: one window per
option) ends the wait; past the last window the options are asked for in turn
again. A new attempt (after a preemption) starts the windows again at the
first option: the capacity it found an hour ago says little now.

``wait_request_s`` 0 keeps the eager rule: every option in one pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from spotline.shared.domain.spec import JobSpec


def option_index(since: datetime | None, now: datetime, wait_request_s: int, count: int) -> int:
    """The option whose window ``now`` falls in; the first before any wait."""
    if since is None or wait_request_s <= 0 or count <= 0:
        return 0
    elapsed_s = max((now - since).total_seconds(), 0.0)
    return int(elapsed_s // wait_request_s) % count


def ask_order(machine_ids: Sequence[str], index: int) -> list[str]:
    """The machine ids of one placement pass: the current option first, then
    the others in turn (asked for only when the current one is refused for
    good, or with ``wait_request_s`` 0)."""
    return [*machine_ids[index:], *machine_ids[:index]]


def window_end(since: datetime, now: datetime, wait_request_s: int) -> datetime | None:
    """When the current option's window ends: the next option is due then,
    whatever the backoff says. None when there are no windows."""
    if wait_request_s <= 0:
        return None
    elapsed_s = max((now - since).total_seconds(), 0.0)
    windows = math.floor(elapsed_s / wait_request_s) + 1
    return since + timedelta(seconds=windows * wait_request_s)


def window_elapsed_s(since: datetime, now: datetime, wait_request_s: int) -> float | None:
    """How long the current option's window has run; None when there are none.
    The backoff starts again with each window, so every option is asked for
    at the quick cadence first, however long the job waited before."""
    if wait_request_s <= 0:
        return None
    return max((now - since).total_seconds(), 0.0) % wait_request_s


def total_wait_s(spec: JobSpec) -> int | None:
    """How long a job may wait for capacity in all; None: no limit."""
    if spec.wait_total_s is None:
        return spec.wait_request_s * len(spec.machine_ids)
    return spec.wait_total_s if spec.wait_total_s > 0 else None


def asked_for(spec: JobSpec, waited_s: float) -> list[str]:
    """The machine ids whose windows have begun after ``waited_s``."""
    count = len(spec.machine_ids)
    if spec.wait_request_s <= 0:
        return list(spec.machine_ids)
    begun = min(count, math.floor(max(waited_s, 0.0) / spec.wait_request_s) + 1)
    return list(spec.machine_ids[:begun])


def capacity_give_up(spec: JobSpec, waited_s: float, tries: int, error: str | None) -> str | None:
    """Why a job waiting for capacity stops (it is CANCELED with this), or None."""
    limit_s = total_wait_s(spec)
    if limit_s is None or waited_s < limit_s:
        return None
    w, count = spec.wait_request_s, len(spec.machine_ids)
    if spec.wait_total_s is None:
        within = f"wait_request_s={w} s per machine option x {count} = {limit_s} s"
    else:
        within = f"wait_total_s={limit_s} s (wait_request_s={w} s per machine option)"
    asked = ", ".join(asked_for(spec, waited_s))
    return f"no capacity within {within}: asked for {asked}; {tries} tries, last: {error}"
