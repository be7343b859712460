"""What a submission reads, counted as Firestore bills it (``CountingStore``):
a constant number of documents, whatever the rest of the team holds. Only the
user's own cooling or stopped VMs can take the job (``claimable``,
``restartable``), so other users' are not read."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from spotline.functions.deps import Deps
from spotline.functions.ops.jobs import admit, start
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.counting_store import CountingStore, Operations
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus
from spotline.shared.settings import Settings
from tests.documents import T0, at, instance
from tests.local_cloud import client


@pytest.fixture
def world(cloud: LocalCloud) -> Iterator[tuple[Deps, CountingStore, InMemoryStore]]:
    inner = InMemoryStore()
    store = CountingStore(inner)
    settings = Settings(project=cloud.project, zones=("us-central1-a",))
    yield Deps(settings, store=store, compute=client(cloud), clock=lambda: T0), store, inner


def _submit(deps: Deps, store: CountingStore, n: int) -> Operations:
    spec = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}
    before = store.ops.snapshot()
    job = admit(deps, JobSpec.model_validate({**spec, "job_id": f"job{n}"}), f"m{n}", T0)
    start(deps, job, T0)
    return store.ops - before


def test_a_submission_reads_no_other_user_s_cooling_or_stopped_vm(
    world: tuple[Deps, CountingStore, InMemoryStore],
) -> None:
    deps, store, inner = world
    alone = _submit(deps, store, 1)
    for n in range(40):
        cooling = instance(f"sl-bob{n}-a1", f"bob{n}", status=InstanceStatus.COOLING)
        inner.create_instance(cooling.model_copy(update={"user": "bob", "cooling_until": at(3600)}))
        stopped = instance(
            f"sl-carol{n}-a1",
            f"carol{n}",
            status=InstanceStatus.CLOSED,
            substatus=InstanceSubstatus.STOPPED,
        )
        inner.create_instance(
            stopped.model_copy(update={"user": "carol", "stopped_until": T0 + timedelta(days=1)})
        )
    crowded = _submit(deps, store, 2)
    assert crowded.reads == alone.reads
    assert crowded.calls == alone.calls


def test_a_placement_asks_once_for_its_job_s_instances(
    world: tuple[Deps, CountingStore, InMemoryStore],
) -> None:
    """A new job's placement looks for a VM its attempt already claimed
    (a redelivery) before it looks for a cooling VM, then a stopped one: one
    query of the job's instances serves both looks."""
    deps, store, _ = world
    placed = _submit(deps, store, 1)
    assert placed.by_method["instances_of_job.calls"] == 1


def test_a_new_vm_s_slot_is_taken_once_and_not_read_again(
    world: tuple[Deps, CountingStore, InMemoryStore],
) -> None:
    """The user document is read for the job's slot and for the VM's slot
    (taken before the insert); recording the VM it made reads it no more."""
    deps, store, _ = world
    placed = _submit(deps, store, 1)
    assert placed.by_method["update_user.calls"] == 2
    assert placed.by_method["update_user.writes"] == 2
