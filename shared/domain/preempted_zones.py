"""Zone order after a preemption (``avoid_preempted_zone_s``). Pure.

A Spot preemption says the zone is short of that capacity now; the next
attempt is likelier to last elsewhere. So for ``avoid_preempted_zone_s``
after a preemption in zone Z, placement tries the other allowed zones first.
Z goes last, not away: when no other zone has capacity, a VM in Z beats
waiting. Only the order changes, so whatever decides which machine options
to try and how long to wait for them is untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from spotline.shared.domain.documents import AttemptRecord


def zone_order(
    zones: Sequence[str], attempts: Sequence[AttemptRecord], avoid_s: int, now: datetime
) -> list[str]:
    """``zones`` with those the job was preempted in within ``avoid_s`` moved
    to the end, the most recently preempted last; the rest keep their order."""
    recent: dict[str, datetime] = {}
    for record in attempts:
        ended = record.ended_at
        if record.outcome != "preempted" or ended is None or avoid_s <= 0:
            continue
        if (now - ended).total_seconds() < avoid_s:
            recent[record.zone] = max(ended, recent.get(record.zone, ended))
    kept = [zone for zone in zones if zone not in recent]
    avoided = sorted((zone for zone in zones if zone in recent), key=lambda z: recent[z])
    return kept + avoided
