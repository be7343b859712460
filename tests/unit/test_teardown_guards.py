"""Letting a VM go for a job (``spotline.functions.ops.teardown``) on the in-memory
store, no emulator: once the user's next job holds the VM (a cooling claim, a
restart), nothing done for the job it served before writes its instance, takes
or frees its slots, or reaches its VM."""

from __future__ import annotations

from typing import Any

from spotline.functions.deps import Deps
from spotline.functions.ops.teardown import after_job, release_instance, stop_instance
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain.documents import InstanceDoc, JobDoc
from spotline.shared.domain.liveness import Owner
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus, JobSubstatus
from spotline.shared.domain.vms import Provisioning
from spotline.shared.settings import Settings
from tests.documents import at, instance, job, user

I = InstanceStatus  # noqa: E741
VM = "sl-job1-a1"
STOP = {"machine_ids": ["g2-standard-4.od"], "stop_period_s": 3600}


def world(*instances: InstanceDoc) -> tuple[Deps, InMemoryStore]:
    """Compute is never built here: a guard that let a step through to the VM
    would fail on the empty endpoint."""
    store = InMemoryStore()
    for doc in instances:
        store.create_instance(doc)
    store.update_user("alice", lambda u: user(active_instances=(VM,)))
    return Deps(Settings(project="guards"), store=store), store


def job1_done(store: InMemoryStore, spec: dict[str, Any]) -> JobDoc:
    """job1, ended on VM, its current attempt's VM, a moment ago."""
    done = job(status=JobStatus.COMPLETED, substatus=JobSubstatus.COMPLETED, spec=spec)
    store.create_job(done)
    return done


def on_demand(doc: InstanceDoc) -> InstanceDoc:
    """Stoppable (a Spot VM is deleted, never stopped)."""
    return doc.model_copy(update={"provisioning": Provisioning.STANDARD})


def held_by_job2(status: InstanceStatus, **fields: Any) -> InstanceDoc:
    return on_demand(instance(job_id="job2", status=status, **fields))


def test_the_end_of_a_job_leaves_the_vm_the_next_job_claimed_from_cooling() -> None:
    claimed = held_by_job2(I.EXECUTING)
    deps, store = world(claimed)
    after_job(deps, job1_done(store, {"cool_down_period_s": 600}), VM, at(10))
    assert store.get_instance(VM) == claimed


def test_the_end_of_a_job_leaves_the_vm_restarted_for_the_next_job() -> None:
    restarted = held_by_job2(I.LAUNCHING)
    deps, store = world(restarted)
    store.create_job(job("job2", substatus=JobSubstatus.CONNECTING_SERVER, spec=STOP))
    after_job(deps, job1_done(store, STOP), VM, at(10))
    assert store.get_instance(VM) == restarted
    held = store.get_user("alice")
    assert held is not None and (held.active_instances, held.stopped_instances) == ([VM], [])


def test_a_release_for_a_job_leaves_another_jobs_vm() -> None:
    claimed = held_by_job2(I.EXECUTING)
    deps, store = world(claimed)
    assert release_instance(deps, VM, at(10), "job canceled", owner=Owner("job1", 1)) == claimed
    assert store.get_instance(VM) == claimed
    # The same attempt number of the same job, but a later attempt holds it: left too.
    later = held_by_job2(I.EXECUTING, attempt=2)
    deps, store = world(later)
    release_instance(deps, VM, at(10), "a late loss", owner=Owner("job2", 1))
    assert store.get_instance(VM) == later


def test_a_stop_read_for_one_job_leaves_the_vm_the_next_job_stopped_with_its_slot() -> None:
    """job1's stop read the instance, then job2 claimed it, ran and stopped it:
    job1's stop writes nothing, stops nothing, and keeps job2's stopped slot."""
    read = on_demand(instance(status=I.EXECUTING))
    stopped = held_by_job2(I.CLOSED, substatus=InstanceSubstatus.STOPPED, stopped_until=at(99))
    deps, store = world(stopped)
    store.update_user("alice", lambda u: user(stopped_instances=(VM,)))
    stop_instance(deps, read, 3600, at(10), "job completed")
    assert store.get_instance(VM) == stopped
    held = store.get_user("alice")
    assert held is not None and held.stopped_instances == [VM]
