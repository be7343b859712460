"""Zone avoidance after a preemption through the handlers: the
next attempt goes to another allowed zone first, and back to the preempted
zone when no other has capacity. Real functions framework, real Firestore
emulator, VMs from the local cloud (zones us-central1-a and -b) through GceCompute."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import SpotPreempted
from tests.conftest import SPEC, vm_event
from tests.emulators.test_recovery import running

pytestmark = pytest.mark.emulators

ONE_MACHINE = {**SPEC, "machine_ids": ["g2-standard-4"]}


def next_zone(call: Callable[..., Any], project: str, spec: dict[str, Any]) -> str | None:
    """Attempt 1 in us-central1-a, preempted: the zone attempt 2 got."""
    running(call, spec)
    first = FirestoreStore(project).get_job("job1")
    assert first is not None and first.zone == "us-central1-a"
    call("on_spot_preempted", "spot_preempted", vm_event(SpotPreempted), message_id="p1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.attempt == 2 and job.instance == "sl-job1-a2"
    return job.zone


def test_the_next_attempt_avoids_the_preempted_zone(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    assert next_zone(call, project, {**ONE_MACHINE, "avoid_preempted_zone_s": 600}) == (
        "us-central1-b"
    )


def test_without_the_setting_the_zones_keep_their_order(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    assert next_zone(call, project, ONE_MACHINE) == "us-central1-a"


def test_the_preempted_zone_is_still_tried_when_no_other_has_capacity(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    host.capacity_errors["us-central1-b"] = "ZONE_RESOURCE_POOL_EXHAUSTED"
    spec = {**ONE_MACHINE, "avoid_preempted_zone_s": 600}
    assert next_zone(call, project, spec) == "us-central1-a"
