"""Stopping on-demand VMs after their job, and restarting them for a later one
(see ``shared.domain.stopping``).

Every step writes Firestore before it calls Compute Engine, so a crash in
between leaves a document the reaper finishes: CLOSING/STOPPING is stopped
again, a LAUNCHING restart is started again by the redelivered placement.
"""

from __future__ import annotations

from datetime import datetime

from functions.deps import Deps
from functions.ops.release import free_instance_slot, release_instance
from shared import logs
from shared.domain.documents import InstanceDoc
from shared.domain.lifecycle import instance_closed
from shared.domain.quotas import free_slot, holds, take_slot
from shared.domain.states import InstanceStatus, InstanceSubstatus
from shared.domain.stopping import (
    STOPPING_OR_STOPPED,
    stop_ended,
    stop_expired,
    stoppable,
    stopped,
    stopping,
)
from shared.domain.vms import Vm


def retire_instance(deps: Deps, name: str, now: datetime, note: str) -> None:
    """Its job is done with the VM: stop it (``try_stop``) or delete it."""
    instance = deps.store.get_instance(name)
    if instance is None or not try_stop(deps, instance, now, note):
        release_instance(deps, name, now, note)


def try_stop(deps: Deps, instance: InstanceDoc, now: datetime, note: str) -> bool:
    """Stop the VM when ``take_stop_slot`` allows it. False: delete it instead."""
    period_s = take_stop_slot(deps, instance, now)
    if period_s is None:
        return False
    stop_instance(deps, instance, period_s, now, note)
    return True


def take_stop_slot(deps: Deps, instance: InstanceDoc, now: datetime) -> int | None:
    """The stop period, when the VM is to be stopped rather than deleted: its
    job asks for that (``stop_period_s``, on demand, one node) and the user's
    stopped-instances quota has room (the slot is now taken). None: delete it."""
    store = deps.store
    job = store.get_job(instance.job_id)
    if job is None or job.nodes or not stoppable(instance, job.spec.stop_period_s):
        return None
    limit = deps.settings.max_stopped_instances
    user = store.update_user(
        instance.user,
        lambda current: take_slot(current, "stopped_instances", instance.name, limit, now),
    )
    if not holds(user, "stopped_instances", instance.name):
        logs.info(f"{instance.name}: not stopped, the stopped-instances quota ({limit}) is full")
        return None
    return job.spec.stop_period_s


def stop_instance(
    deps: Deps, instance: InstanceDoc, period_s: int, now: datetime, note: str
) -> None:
    """CLOSING/STOPPING, stop the VM, then CLOSED/STOPPED. Re-entrant.

    When the instance is being deleted already (the reaper released it while
    its job was finishing), the deletion goes on and nothing is stopped.
    """
    store, rule = deps.store, deps.settings.cooling_rule
    closing = store.update_instance(instance.name, lambda current: stopping(current, now, note))
    if closing is None or closing.substatus not in STOPPING_OR_STOPPED:
        free_stopped_slot(deps, instance.user, instance.name, now)
        return
    if not deps.compute.stop(instance.zone, instance.name):
        _forget(deps, instance, now, "the VM was gone when it was to be stopped")
        return
    store.update_instance(instance.name, lambda current: stopped(current, now, period_s, rule))
    # A stopped VM counts against the stopped-instances quota, not the active one.
    free_instance_slot(deps, instance.user, instance.name, now)
    logs.info(f"{instance.name}: stopped, kept {period_s} s", instance=instance.name)


def end_stopped(deps: Deps, instance: InstanceDoc, vm: Vm | None, now: datetime) -> str | None:
    """The reaper, for a stopped instance: delete it once its period is over;
    close it when its VM is gone. The document is closed first, with a guarded
    write, so a job restarting it at that moment keeps it: one of the two wins."""
    if vm is None:
        _forget(deps, instance, now, "the stopped VM is gone")
        return "stopped_lost"
    if not stop_expired(instance, now):
        return None
    ended = deps.store.update_instance(
        instance.name,
        lambda current: (
            stop_ended(current, now, "stop period over") if stop_expired(current, now) else current
        ),
    )
    if ended is None or ended.substatus != InstanceSubstatus.TERMINATED:
        return None  # restarted (and maybe stopped again) meanwhile
    deps.compute.delete(instance.zone, instance.name)
    free_stopped_slot(deps, instance.user, instance.name, now)
    return "stopped_ended"


def _forget(deps: Deps, instance: InstanceDoc, now: datetime, note: str) -> None:
    """CLOSED/TERMINATED, and the user's stopped slot free."""
    store = deps.store
    store.update_instance(instance.name, lambda current: _terminated(current, now, note))
    free_instance_slot(deps, instance.user, instance.name, now)
    free_stopped_slot(deps, instance.user, instance.name, now)


def free_stopped_slot(deps: Deps, user: str, name: str, now: datetime) -> None:
    """The VM is no longer stopped (restarted, deleted, gone, or never got
    there): it no longer counts against the user's stopped-instances quota."""
    deps.store.update_user(user, lambda current: free_slot(current, "stopped_instances", name, now))


def _terminated(instance: InstanceDoc, now: datetime, note: str) -> InstanceDoc:
    if instance.status == InstanceStatus.CLOSED:
        return stop_ended(instance, now, note)
    return instance_closed(instance, now, note)  # it never got to STOPPED
