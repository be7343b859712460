"""A job that can never be placed is refused or ended, never stranded.

What the deployment knows at submission (its catalog, its region, the ids it
derives) is refused as a rejected submission: no job, no slot. What only
Compute Engine can say (no such image, no such zone) ends the job FAILED with
the reason, its slots free, no queue entry, and the reaper leaves it alone.

The submit handler and the reaper's sweep run on the in-memory store; VMs come
from the local cloud (records, no processes) through GceCompute. The same over
the wire, on the Firestore emulator: tests/emulators/test_placement_errors_wire.py.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message
from spotline.functions.handlers.submit_job import submit_job
from spotline.functions.ops.recovery import recover
from spotline.functions.ops.sweep import sweep
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain.errors import PermanentError, Unplaceable
from spotline.shared.domain.lifecycle import job_id_for
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.settings import Settings
from tests.documents import job
from tests.unit.test_gce_compute import vm_request

SPEC: dict[str, Any] = {
    "user": "alice",
    "machine_ids": ["g2-standard-4", "n1-standard-8-t4.od"],
    "trainer": "digits_mlp",
    "job_id": "job1",
}
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
# Settings' default image for the local cloud's project.
IMAGE = "projects/spotline-test/global/images/family/spotline-agent"

# The handler itself, without the Pub/Sub wrapper that acknowledges a PermanentError.
submit: Callable[[Message, Deps], None] = submit_job.__wrapped__  # type: ignore[attr-defined]


def message(spec: dict[str, Any], message_id: str) -> Message:
    return Message(data=json.dumps(spec).encode(), message_id=message_id, publish_time=NOW)


def world(cloud: LocalCloud) -> tuple[Deps, InMemoryStore]:
    store = InMemoryStore()
    settings = Settings(
        project=cloud.project,
        compute_endpoint=cloud.endpoint,
        zones=("us-central1-a", "us-central1-b"),
    )
    return Deps(settings, store=store, clock=lambda: NOW), store


def reaper_tick(deps: Deps, store: InMemoryStore, at: datetime | None = None) -> Counter[str]:
    """One sweep, by default an hour later: past every timeout and backoff."""
    later = at or NOW + timedelta(hours=1)
    return sweep(Deps(deps.settings, store=store, compute=deps.compute, clock=lambda: later), later)


def inserts(cloud: LocalCloud) -> int:
    return len(cloud.requests_to("POST", "/instances")) + len(
        cloud.requests_to("POST", "/bulkInsert")
    )


def assert_rejected(
    deps: Deps, store: InMemoryStore, cloud: LocalCloud, spec: dict[str, Any], reason: str
) -> None:
    with pytest.raises(PermanentError):
        submit(message(spec, "m1"), deps)
    rejection = store.get_rejection("m1")
    assert rejection is not None and reason in rejection.reason, rejection
    assert store.list_jobs() == [] and store.list_users() == []
    assert inserts(cloud) == 0


# -- refused at submission: what the deployment knows --


def test_a_machine_id_not_in_the_catalog_is_a_rejected_submission(cloud: LocalCloud) -> None:
    deps, store = world(cloud)
    spec = {**SPEC, "machine_ids": ["g2-standard-4", "p2-xlarge.od"]}
    assert_rejected(deps, store, cloud, spec, "machine_ids: 'p2-xlarge.od' is not in the catalog")


def test_a_zone_outside_the_deployments_region_is_a_rejected_submission(
    cloud: LocalCloud,
) -> None:
    deps, store = world(cloud)
    spec = {**SPEC, "zones": ["us-central1-a", "europe-west4-a"]}
    assert_rejected(deps, store, cloud, spec, "'europe-west4-a' is not a zone of us-central1")


def test_a_job_id_of_the_derived_form_is_a_rejected_submission(cloud: LocalCloud) -> None:
    deps, store = world(cloud)
    squatter = job_id_for(JobSpec.model_validate({**SPEC, "job_id": None}), "m2")
    assert_rejected(deps, store, cloud, {**SPEC, "job_id": squatter}, "derives from message ids")
    # The message it would have squatted gets its own id.
    submit(message({k: v for k, v in SPEC.items() if k != "job_id"}, "m2"), deps)
    placed = store.get_job(squatter)
    assert placed is not None and placed.substatus == JobSubstatus.CONNECTING_SERVER


def test_a_job_id_that_only_looks_like_one_is_accepted(cloud: LocalCloud) -> None:
    deps, store = world(cloud)
    for job_id in ("j0123456789a", "j0123456789abc", "jobabcdef0123"):
        submit(message({**SPEC, "job_id": job_id}, job_id), deps)
        assert store.get_job(job_id) is not None


# -- ended at placement: what only Compute Engine says --


def test_an_image_compute_engine_cannot_find_fails_the_job_and_frees_its_slots(
    cloud: LocalCloud,
) -> None:
    deps, store = world(cloud)
    cloud.missing_images.add(IMAGE)
    submit(message(SPEC, "m1"), deps)
    ended = store.get_job("job1")
    assert ended is not None and (ended.status, ended.substatus) == (
        JobStatus.FAILED,
        JobSubstatus.FAILED,
    )
    assert ended.error is not None and f"'{IMAGE}' was not found" in ended.error
    assert "cannot be placed" in ended.error
    # Every option was asked once, and nothing holds a slot or waits in the queue.
    assert inserts(cloud) == 4 and cloud.list() == []
    assert store.get_queue("job1") is None
    user = store.get_user("alice")
    assert user is not None and (user.active_jobs, user.active_instances) == ([], [])
    # The reaper does not try again.
    reaper_tick(deps, store)
    assert inserts(cloud) == 4
    again = store.get_job("job1")
    assert again is not None and again.history == ended.history


def test_a_gang_whose_image_is_missing_fails_and_frees_every_node_slot(cloud: LocalCloud) -> None:
    deps, store = world(cloud)
    cloud.missing_images.add(IMAGE)
    submit(message({**SPEC, "nodes": 2}, "m1"), deps)
    ended = store.get_job("job1")
    assert ended is not None and ended.status == JobStatus.FAILED
    assert ended.error is not None and "was not found" in ended.error
    user = store.get_user("alice")
    assert user is not None and (user.active_jobs, user.active_instances) == ([], [])
    assert store.get_queue("job1") is None and cloud.list() == []


def test_a_zone_refused_for_good_gives_way_to_the_next_one(cloud: LocalCloud) -> None:
    deps, store = world(cloud)
    submit(message({**SPEC, "zones": ["us-central1-z", "us-central1-b"]}, "m1"), deps)
    placed = store.get_job("job1")
    assert placed is not None and (placed.substatus, placed.zone) == (
        JobSubstatus.CONNECTING_SERVER,
        "us-central1-b",
    )


def test_a_refused_zone_and_a_full_one_wait_for_capacity(cloud: LocalCloud) -> None:
    deps, store = world(cloud)
    cloud.capacity_errors["us-central1-b"] = "ZONE_RESOURCE_POOL_EXHAUSTED"
    submit(message({**SPEC, "zones": ["us-central1-z", "us-central1-b"]}, "m1"), deps)
    waiting = store.get_job("job1")
    assert waiting is not None and waiting.substatus == JobSubstatus.WAITING_FOR_CAPACITY
    entry = store.get_queue("job1")
    assert entry is not None and entry.last_error is not None
    assert "us-central1-z" in entry.last_error
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in entry.last_error


def test_a_queued_job_whose_machine_left_the_catalog_fails_at_the_reapers_retry(
    cloud: LocalCloud,
) -> None:
    deps, store = world(cloud)
    stranded = job(
        substatus=JobSubstatus.REQUESTING_SERVER,
        status=JobStatus.QUEUING,
        spec={"machine_ids": ["retired-gpu-1"]},
    )
    store.create_job(stranded)
    store.update_user("alice", lambda u: u.model_copy(update={"active_jobs": ["job1"]}))
    counts = reaper_tick(deps, store)
    ended = store.get_job("job1")
    assert ended is not None and ended.status == JobStatus.FAILED, counts
    assert ended.error is not None and "'retired-gpu-1' is not in the catalog" in ended.error
    user = store.get_user("alice")
    assert user is not None and (user.active_jobs, user.active_instances) == ([], [])
    assert store.get_queue("job1") is None and inserts(cloud) == 0


def test_a_job_waiting_for_capacity_fails_when_its_retry_is_refused_for_good(
    cloud: LocalCloud,
) -> None:
    deps, store = world(cloud)
    for zone in ("us-central1-a", "us-central1-b"):
        cloud.capacity_errors[zone] = "ZONE_RESOURCE_POOL_EXHAUSTED"
    submit(message(SPEC, "m1"), deps)
    entry = store.get_queue("job1")
    assert entry is not None
    cloud.capacity_errors.clear()
    cloud.missing_images.add(IMAGE)  # say, the image family was deleted meanwhile
    reaper_tick(deps, store, at=entry.not_before)  # its retry is due, wait_request_s is not out
    ended = store.get_job("job1")
    assert ended is not None and ended.status == JobStatus.FAILED
    assert ended.error is not None and "was not found" in ended.error
    assert store.get_queue("job1") is None
    user = store.get_user("alice")
    assert user is not None and (user.active_jobs, user.active_instances) == ([], [])


def test_the_next_attempt_after_a_preemption_fails_when_refused_for_good(
    cloud: LocalCloud,
) -> None:
    deps, store = world(cloud)
    submit(message(SPEC, "m1"), deps)
    instance = store.get_instance("sl-job1-a1")
    assert instance is not None
    cloud.missing_images.add(IMAGE)
    recover(deps, instance, JobSubstatus.PREEMPTED, NOW, note="preempted")
    ended = store.get_job("job1")
    assert ended is not None and (ended.status, ended.attempt) == (JobStatus.FAILED, 2)
    assert ended.error is not None and "cannot be placed" in ended.error
    # The attempt's queue entry (the safety net written before placing) is gone.
    assert store.get_queue("job1") is None and cloud.list() == []
    user = store.get_user("alice")
    assert user is not None and (user.active_jobs, user.active_instances) == ([], [])


# -- the wire: what the local cloud answers, and how GceCompute names it --


def test_an_insert_naming_a_missing_image_is_unplaceable(
    cloud: LocalCloud, compute: GceCompute
) -> None:
    missing = vm_request()
    cloud.missing_images.add(missing.image)
    with pytest.raises(Unplaceable, match=f"The resource '{missing.image}' was not found"):
        compute.insert(missing)
    [sent] = cloud.requests_to("POST", "/instances")
    assert sent.body is not None and json.dumps(sent.body).count(missing.image) == 1
    assert cloud.list() == []


def test_an_insert_in_a_zone_that_does_not_exist_is_unplaceable(compute: GceCompute) -> None:
    with pytest.raises(Unplaceable, match="us-central1-z"):
        compute.insert(vm_request(zone="us-central1-z"))
