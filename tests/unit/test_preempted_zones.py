"""Zone avoidance after a preemption, pure: zones where the job
was preempted within ``avoid_preempted_zone_s`` go last, never away."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spotline.shared.domain.documents import AttemptRecord
from spotline.shared.domain.preempted_zones import zone_order

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]


def attempt(n: int, zone: str, outcome: str | None, ended_s: float | None) -> AttemptRecord:
    return AttemptRecord(
        attempt=n,
        instance=f"sl-j-a{n}",
        zone=zone,
        machine_id="g2-standard-4",
        started_at=T0,
        outcome=outcome,
        ended_at=None if ended_s is None else T0 + timedelta(seconds=ended_s),
    )


def test_a_recently_preempted_zone_goes_last() -> None:
    records = [attempt(1, "us-central1-a", "preempted", 100)]
    order = zone_order(ZONES, records, 600, T0 + timedelta(seconds=200))
    assert order == ["us-central1-b", "us-central1-c", "us-central1-a"]


def test_the_zones_keep_their_order_once_the_period_is_over_or_when_off() -> None:
    records = [attempt(1, "us-central1-a", "preempted", 100)]
    assert zone_order(ZONES, records, 600, T0 + timedelta(seconds=701)) == ZONES
    assert zone_order(ZONES, records, 0, T0 + timedelta(seconds=200)) == ZONES


def test_only_preemptions_count_and_the_latest_preempted_zone_is_last() -> None:
    records = [
        attempt(1, "us-central1-b", "preempted", 100),
        attempt(2, "us-central1-a", "preempted", 150),
        attempt(3, "us-central1-c", "failed", 180),
        attempt(4, "us-central1-c", "stalled", 190),
    ]
    order = zone_order(ZONES, records, 600, T0 + timedelta(seconds=200))
    assert order == ["us-central1-c", "us-central1-b", "us-central1-a"]


def test_every_zone_preempted_still_leaves_every_zone() -> None:
    records = [attempt(n, zone, "preempted", 100 + n) for n, zone in enumerate(ZONES, 1)]
    order = zone_order(ZONES, records, 600, T0 + timedelta(seconds=200))
    assert sorted(order) == sorted(ZONES) and order == ZONES
