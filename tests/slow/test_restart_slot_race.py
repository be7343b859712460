"""A stopped VM being restarted for a job, and the other writers of its
active-instance slot: the reaper's user page (stage 4) and another job of the
same user restarting the same VM.

``claim_stopped`` (``spotline.functions.ops.reuse``) takes the VM's slot first, then
claims the instance document (the restart write). Between the two the
instance is still CLOSED/STOPPED while the user's list names it, which is
also what a slot leaked by a crash looks like. Each test steps another writer
into that gap (``Interleaved`` runs it just before the restart write) and
checks that the VM which runs afterwards holds its slot: a VM running without
one lets the user place one VM more than ``max_active_instances`` for as long
as it lives, since nothing adds a missing slot back.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from spotline.functions.deps import Deps
from spotline.functions.ops.reuse import claim_stopped
from spotline.functions.ops.sweep_pages import SweepPage, run_page
from spotline.functions.ops.teardown import stop_instance
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain.documents import InstanceDoc, JobDoc, UserDoc
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus, JobSubstatus
from spotline.shared.domain.vms import Provisioning
from spotline.shared.settings import Settings
from tests.documents import at, instance, job
from tests.local_cloud import add_instance, client

ZONE = "us-central1-a"
VM = "sl-old-a1"  # made for job "old", which completed; its VM was stopped
OD = "g2-standard-4.od"
NOW = at(600)


class Interleaved(InMemoryStore):
    """The in-memory store, which runs ``before_restart`` once, just before
    the first write of instance ``VM`` (the restart write): the moment another
    writer can step in between a restart's slot and its claim; and
    ``once_stopped`` once, just after a write leaves ``VM`` CLOSED/STOPPED."""

    def __init__(self) -> None:
        super().__init__()
        self.before_restart: Callable[[], None] | None = None
        self.once_stopped: Callable[[], None] | None = None

    def update_instance(
        self, name: str, change: Callable[[InstanceDoc], InstanceDoc]
    ) -> InstanceDoc | None:
        step, self.before_restart = self.before_restart, None
        if name == VM and step is not None:
            step()
        written = super().update_instance(name, change)
        if name == VM and written is not None and written.substatus == InstanceSubstatus.STOPPED:
            then, self.once_stopped = self.once_stopped, None
            if then is not None:
                then()
        return written


def _world(cloud: LocalCloud, *placing: str) -> tuple[Deps, Interleaved]:
    """User alice: job "old" completed on VM, which is stopped (its stopped
    slot held); the jobs ``placing`` each hold a job slot and are being
    placed (REQUESTING_SERVER) on the same on-demand machine."""
    store = Interleaved()
    settings = Settings(project=cloud.project, zones=(ZONE,))
    deps = Deps(settings, store=store, compute=client(cloud), clock=lambda: NOW)
    add_instance(cloud, ZONE, VM, status="TERMINATED", machine_type="g2-standard-4")
    spec = {"machine_ids": [OD], "stop_period_s": 3600}
    done = JobSubstatus.COMPLETED
    store.create_job(
        job("old", spec=spec, pending_events=[], status=JobStatus.COMPLETED, substatus=done)
    )
    stopped = instance(
        VM, "old", status=InstanceStatus.CLOSED, substatus=InstanceSubstatus.STOPPED
    ).model_copy(
        update={
            "zone": ZONE,
            "machine_id": OD,
            "provisioning": Provisioning.STANDARD,
            "closed_at": NOW - timedelta(seconds=60),
            "stopped_until": NOW + timedelta(seconds=3600),
        }
    )
    store.create_instance(stopped)
    for job_id in placing:
        store.create_job(
            job(job_id, spec=spec, pending_events=[], substatus=JobSubstatus.REQUESTING_SERVER)
        )
    held = {"active_jobs": list(placing), "stopped_instances": [VM]}
    store.update_user("alice", lambda u: u.model_copy(update=held))
    return deps, store


def _read(store: InMemoryStore, job_id: str) -> JobDoc:
    found = store.get_job(job_id)
    assert found is not None
    return found


def _alice(store: InMemoryStore) -> UserDoc:
    found = store.get_user("alice")
    assert found is not None
    return found


def _user_page(deps: Deps) -> None:
    run_page(deps, SweepPage(kind="users", listed_at=NOW, keys=["alice"]), NOW)


@pytest.mark.slow
def test_a_user_page_between_the_restart_s_slot_and_its_claim_leaves_the_slot(
    cloud: LocalCloud,
) -> None:
    """The page reads the user (the VM's name listed), the VM's job (``old``,
    completed: nothing places a VM of that name) and the instance (stopped):
    every sign of a leaked slot. It freed it; the restart write came next,
    and the VM ran for job2 holding no slot."""
    deps, store = _world(cloud, "job2")
    store.before_restart = lambda: _user_page(deps)
    assert claim_stopped(deps, _read(store, "job2"), [OD], NOW) is not None
    restarted = store.get_instance(VM)
    assert restarted is not None and (restarted.status, restarted.job_id) == (
        InstanceStatus.LAUNCHING,
        "job2",
    )
    assert _alice(store).active_instances == [VM]
    assert _alice(store).stopped_instances == []


def test_two_jobs_restarting_one_stopped_vm_leave_the_winner_its_slot(
    cloud: LocalCloud,
) -> None:
    """job2 takes the VM's slot; job3 (same user, same machine) finds the name
    held and took it as its own, won the restart write before job2's, and
    job2, losing, freed the slot: job3's VM ran holding none."""
    deps, store = _world(cloud, "job2", "job3")

    def job3_restarts() -> None:
        claim_stopped(deps, _read(store, "job3"), [OD], NOW)

    store.before_restart = job3_restarts
    claim_stopped(deps, _read(store, "job2"), [OD], NOW)
    restarted = store.get_instance(VM)
    assert restarted is not None and restarted.status == InstanceStatus.LAUNCHING
    assert restarted.job_id in ("job2", "job3")
    assert _alice(store).active_instances == [VM]


def test_a_leaked_slot_of_a_stopped_vm_is_freed_once_no_job_of_the_user_is_placed(
    cloud: LocalCloud,
) -> None:
    """What the page must still repair: a restart that died after taking the
    slot. While a job of the user is being placed the slot may be that
    restart's, and is left; once none is, the next page frees it."""
    deps, store = _world(cloud, "job2")
    store.update_user("alice", lambda u: u.model_copy(update={"active_instances": [VM]}))
    _user_page(deps)
    assert _alice(store).active_instances == [VM]  # job2 may be restarting it
    placed = {"substatus": JobSubstatus.CONNECTING_SERVER, "instance": "sl-job2-a1"}
    store.update_job("job2", lambda j: j.model_copy(update=placed))
    _user_page(deps)
    assert _alice(store).active_instances == []


def test_a_restart_right_after_the_stop_keeps_its_slot_from_the_stopper(
    cloud: LocalCloud,
) -> None:
    """The stop wrote CLOSED/STOPPED, then freed the VM's active slot. In
    between, job2 restarted the VM: the name was held (the stopper's), so its
    slot was taken already; then the stopper freed it, and the VM ran for job2
    holding none. The stopper now frees the slot before the VM is STOPPED,
    when no job can restart it."""
    deps, store = _world(cloud, "job2")
    closing = {"status": InstanceStatus.CLOSING, "substatus": InstanceSubstatus.STOPPING}
    store.update_instance(VM, lambda i: i.model_copy(update={**closing, "stopped_until": None}))
    store.update_user("alice", lambda u: u.model_copy(update={"active_instances": [VM]}))
    deps.compute.start(ZONE, VM)  # the VM still runs: the stop is under way

    def job2_restarts() -> None:
        claim_stopped(deps, _read(store, "job2"), [OD], NOW)

    store.once_stopped = job2_restarts
    being_stopped = store.get_instance(VM)
    assert being_stopped is not None
    stop_instance(deps, being_stopped, 3600, NOW, "job old completed")
    restarted = store.get_instance(VM)
    assert restarted is not None and (restarted.status, restarted.job_id) == (
        InstanceStatus.LAUNCHING,
        "job2",
    )
    assert _alice(store).active_instances == [VM]
