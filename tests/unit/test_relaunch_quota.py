"""Every launch the reaper makes goes through the user's active-jobs quota, as
submit_job's does: a job that holds no job slot (its submission died between
the job's creation and its slot) waits for quota when the quota is full,
instead of getting a VM past it. The in-memory store and the local cloud
(VMs are records) stand in for Firestore and Compute Engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spotline.functions.deps import Deps
from spotline.functions.ops.jobs import admit
from spotline.functions.ops.sweep_apply import apply
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain import reaping as r
from spotline.shared.domain.documents import UserDoc
from spotline.shared.domain.queueing import next_attempt
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.settings import Settings
from tests.documents import T0, at
from tests.local_cloud import client

SPEC = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}


@pytest.fixture
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud("relaunch-quota", RecordLauncher(), clock=lambda: T0) as running:
        yield running


def world(cloud: LocalCloud) -> tuple[Deps, InMemoryStore]:
    """alice at her one active job ("other"), and job1 created without a slot."""
    store = InMemoryStore()
    settings = Settings(
        project=cloud.project, zones=("us-central1-a", "us-central1-b"), max_active_jobs=1
    )
    deps = Deps(settings, store=store, compute=client(cloud), clock=lambda: T0)
    store.update_user(
        "alice", lambda user: UserDoc(user="alice", active_jobs=["other"], updated_at=T0)
    )
    admit(deps, JobSpec.model_validate({**SPEC, "job_id": "job1"}), "m1", T0)
    return deps, store


def test_a_job_placed_again_waits_for_its_job_slot(cloud: LocalCloud) -> None:
    deps, store = world(cloud)
    job = store.get_job("job1")
    assert job is not None
    apply(deps, [r.PlaceAgain(job)], at(121))
    assert_waits_for_quota(deps, store, cloud)


def test_a_job_retried_from_the_queue_waits_for_its_job_slot(cloud: LocalCloud) -> None:
    deps, store = world(cloud)
    job = store.get_job("job1")
    assert job is not None
    entry = next_attempt(job, "new", T0)
    store.put_queue(entry)
    apply(deps, [r.RetryPlacement(job, entry)], at(1))
    assert_waits_for_quota(deps, store, cloud)


def assert_waits_for_quota(deps: Deps, store: InMemoryStore, cloud: LocalCloud) -> None:
    job = store.get_job("job1")
    assert job is not None and job.substatus == JobSubstatus.WAITING_FOR_QUOTA
    assert cloud.list() == []
    user = store.get_user("alice")
    assert user is not None and (user.active_jobs, user.active_instances) == (["other"], [])
    entry = store.get_queue("job1")
    assert entry is not None and entry.reason == "quota"
