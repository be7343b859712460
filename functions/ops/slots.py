"""A user's three kinds of slot (``spotline.shared.domain.quotas``), held on ``users/{user}``.

- job slots (``max_active_jobs``): taken before a job's first VM is requested,
  freed when the job ends;
- active-instance slots (``max_active_instances``): one per VM name, taken
  before a VM is created or a stopped one restarted, held while the VM lives
  (cooling included: the user pays for it), freed when it closes or stops;
- stopped-instance slots (``max_stopped_instances``): one per stopped VM.

Every change is a guarded write of the user document, so concurrent placements
never hold more than the quota. This module only keeps the lists: what to do
when a list is full (end a cooling VM, wait) is the callers' business.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from spotline.functions.deps import Deps
from spotline.shared import logs
from spotline.shared.domain.documents import InstanceDoc, JobDoc, UserDoc
from spotline.shared.domain.quotas import free_slot, holds, keep_slot, over_quota_reason, take_slots
from spotline.shared.domain.restore_gate import earlier_slots
from spotline.shared.domain.states import InstanceSubstatus
from spotline.shared.domain.stopping import stoppable


def take_job_slot(deps: Deps, job: JobDoc, now: datetime) -> str | None:
    """None when the job holds a slot (now or already); else why not."""
    limit = deps.settings.max_active_jobs
    user = deps.store.update_user(
        job.user, lambda current: take_slots(current, "active_jobs", [job.job_id], limit, now)
    )
    if holds(user, "active_jobs", job.job_id):
        return None
    return over_quota_reason(user, "active_jobs", limit)


def free_job_slot(deps: Deps, user: str, job_id: str, now: datetime) -> None:
    deps.store.update_user(user, lambda current: free_slot(current, "active_jobs", job_id, now))


def take_instance_slots(
    deps: Deps, job: JobDoc, names: Sequence[str], now: datetime, *, overlap: bool = False
) -> UserDoc:
    """Hold a slot for each of the VMs ``names``, all or none; the user as
    written (``holds_instance_slots`` says whether they are held).

    Args:
        overlap: the VMs of the job's earlier attempts still held (being
            deleted) raise the limit by as many, for the job's next VMs only.
    """
    limit = deps.settings.max_active_instances

    def take(current: UserDoc) -> UserDoc:
        spare = len(earlier_slots(job, current.active_instances)) if overlap else 0
        return take_slots(current, "active_instances", names, limit + spare, now)

    return deps.store.update_user(job.user, take)


def holds_instance_slots(user: UserDoc, names: Sequence[str]) -> bool:
    return all(holds(user, "active_instances", name) for name in names)


def instance_quota_reason(deps: Deps, user: UserDoc) -> str:
    return over_quota_reason(user, "active_instances", deps.settings.max_active_instances)


def keep_instance_slot(deps: Deps, user: str, name: str, now: datetime) -> None:
    """The VM exists (adopted by a redelivered placement): it holds a slot,
    whatever the limit, so the list stays true."""
    deps.store.update_user(user, lambda current: keep_slot(current, "active_instances", name, now))


def free_instance_slot(
    deps: Deps, user: str, name: str, now: datetime, as_read: UserDoc | None = None
) -> bool:
    """The VM is gone or stopped (or was never made): it no longer counts
    against the user's active-instances quota. With ``as_read``, only while
    the user document is still that one (the reaper judged the slot stale on
    it). True: the slot is not held now."""

    def free(current: UserDoc) -> UserDoc:
        if as_read is not None and current != as_read:
            return current
        return free_slot(current, "active_instances", name, now)

    return not holds(deps.store.update_user(user, free), "active_instances", name)


def free_slot_of_stopping(deps: Deps, user: str, name: str, now: datetime) -> None:
    """Free the active slot of VM ``name``, which is being stopped, unless it
    is stopped already: then a job of the user may have restarted it and
    taken the slot (a stop run again, or two stoppers at once). Read in that
    order, the user then the instance, and freed only from the user as read:
    a restart takes the slot after the instance is STOPPED, so one that took
    it before the instance read is seen there, and one after changes the
    user."""
    store = deps.store
    holder = store.get_user(user)
    if holder is None or not holds(holder, "active_instances", name):
        return
    instance = store.get_instance(name)
    if instance is not None and instance.substatus != InstanceSubstatus.STOPPING:
        return
    free_instance_slot(deps, user, name, now, as_read=holder)


def take_stop_slot(deps: Deps, instance: InstanceDoc, now: datetime) -> int | None:
    """The stop period, when the VM is to be stopped rather than deleted: its
    job asks for that (``stop_period_s``, on demand, one node) and the user's
    stopped-instances quota has room (the slot is now taken). None: delete it."""
    job = deps.store.get_job(instance.job_id)
    if job is None or job.nodes or not stoppable(instance, job.spec.stop_period_s):
        return None
    limit = deps.settings.max_stopped_instances
    user = deps.store.update_user(
        instance.user,
        lambda current: take_slots(current, "stopped_instances", [instance.name], limit, now),
    )
    if not holds(user, "stopped_instances", instance.name):
        logs.info(f"{instance.name}: not stopped, the stopped-instances quota ({limit}) is full")
        return None
    return job.spec.stop_period_s


def free_stopped_slot(deps: Deps, user: str, name: str, now: datetime) -> None:
    """The VM is no longer stopped (restarted, deleted, gone, or never got
    there): it no longer counts against the user's stopped-instances quota."""
    deps.store.update_user(user, lambda current: free_slot(current, "stopped_instances", name, now))
