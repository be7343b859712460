"""Stopping on-demand VMs after their job, and restarting them for a later one
(see ``shared.stopping``).

Every step writes Firestore before it calls Compute Engine, so a crash in
between leaves a document the reaper finishes: CLOSING/STOPPING is stopped
again, a LAUNCHING restart is started again by the redelivered placement.
"""

from __future__ import annotations

from datetime import datetime

from functions import deps
from functions.assignments import assignment_for
from functions.cooling import reused_vm
from functions.release import release_instance
from shared import logs
from shared.compute.port import JOB_METADATA_KEY, CapacityError, Vm
from shared.documents import InstanceDoc, JobDoc
from shared.errors import PermanentError
from shared.lifecycle import instance_closed
from shared.placement import Option, vm_name
from shared.quotas import free_slot, holds, take_slot
from shared.states import InstanceStatus, InstanceSubstatus
from shared.stopping import (
    restartable,
    restarted,
    stop_ended,
    stop_expired,
    stoppable,
    stopped,
    stopping,
)


def retire_instance(name: str, now: datetime, note: str) -> None:
    """Its job is done with the VM: stop it (``try_stop``) or delete it."""
    instance = deps.store().get_instance(name)
    if instance is None or not try_stop(instance, now, note):
        release_instance(name, now, note)


def try_stop(instance: InstanceDoc, now: datetime, note: str) -> bool:
    """Stop the VM when its job asks for that (``stop_period_s``, on demand,
    one node) and the user's stopped-instances quota has room. False: delete
    it instead."""
    store = deps.store()
    job = store.get_job(instance.job_id)
    if job is None or job.nodes or not stoppable(instance, job.spec.stop_period_s):
        return False
    limit = deps.settings().max_stopped_instances
    user = store.update_user(
        instance.user,
        lambda current: take_slot(current, "stopped_instances", instance.name, limit, now),
    )
    if not holds(user, "stopped_instances", instance.name):
        logs.info(f"{instance.name}: not stopped, the stopped-instances quota ({limit}) is full")
        return False
    stop_instance(instance, job.spec.stop_period_s, now, note)
    return True


def stop_instance(instance: InstanceDoc, period_s: int, now: datetime, note: str) -> None:
    """CLOSING/STOPPING, stop the VM, then CLOSED/STOPPED. Re-entrant."""
    store, rule = deps.store(), deps.settings().cooling_rule
    store.update_instance(instance.name, lambda current: stopping(current, now, note))
    if not deps.compute().stop(instance.zone, instance.name):
        _forget(instance, now, "the VM was gone when it was to be stopped")
        return
    store.update_instance(instance.name, lambda current: stopped(current, now, period_s, rule))
    logs.info(f"{instance.name}: stopped, kept {period_s} s", instance=instance.name)


def claim_stopped(job: JobDoc, machine_ids: list[str], now: datetime) -> tuple[Vm, Option] | None:
    """Restart a stopped VM of the job's user for one of its machine ids, in
    the job's order, with the job in its metadata. None: none to restart."""
    store = deps.store()
    for instance in store.instances_of_job(job.job_id):
        if _restarted_for(instance, job):
            return _boot(job, instance, now)  # a redelivery: boot it again, idempotently
    zones = set(job.spec.zones or deps.settings().zones)
    candidates = [i for i in store.stopped_instances() if i.zone in zones]
    for machine_id in machine_ids:
        for instance in candidates:
            if not restartable(instance, job.user, machine_id, now):
                continue
            won = store.update_instance(
                instance.name, lambda current: restarted(current, job.job_id, job.attempt, now)
            )
            if won is None or not _restarted_for(won, job):
                continue  # another job took it first
            _free_stopped_slot(won, now)
            found = _boot(job, won, now)
            if found is not None:
                return found
    return None


def end_stopped(instance: InstanceDoc, vm: Vm | None, now: datetime) -> str | None:
    """The reaper, for a stopped instance: delete it once its period is over;
    close it when its VM is gone. The document is closed first, with a guarded
    write, so a job restarting it at that moment keeps it: one of the two wins."""
    if vm is None:
        _forget(instance, now, "the stopped VM is gone")
        return "stopped_lost"
    if not stop_expired(instance, now):
        return None
    ended = deps.store().update_instance(
        instance.name,
        lambda current: (
            stop_ended(current, now, "stop period over") if stop_expired(current, now) else current
        ),
    )
    if ended is None or ended.substatus != InstanceSubstatus.TERMINATED:
        return None  # restarted (and maybe stopped again) meanwhile
    deps.compute().delete(instance.zone, instance.name)
    _free_stopped_slot(instance, now)
    return "stopped_ended"


def _restarted_for(instance: InstanceDoc, job: JobDoc) -> bool:
    """A VM restarted for this attempt (a new VM would carry the attempt's name)."""
    return (
        instance.job_id == job.job_id
        and instance.attempt == job.attempt
        and instance.status == InstanceStatus.LAUNCHING
        and instance.name != vm_name(job.job_id, job.attempt)
    )


def _boot(job: JobDoc, instance: InstanceDoc, now: datetime) -> tuple[Vm, Option] | None:
    """Hand the VM the job, then start it. None: it cannot start (no capacity
    in its zone now, or it is gone), and it is deleted."""
    compute = deps.compute()
    try:
        assignment = assignment_for(job).model_dump_json()
        compute.set_metadata(instance.zone, instance.name, {JOB_METADATA_KEY: assignment})
        compute.start(instance.zone, instance.name)
    except (CapacityError, PermanentError) as err:
        logs.warning(f"{instance.name}: cannot restart ({err}); deleting it")
        release_instance(instance.name, now, f"cannot restart: {err}")
        return None
    logs.info(f"job {job.job_id}: restarted stopped instance {instance.name}", job_id=job.job_id)
    return reused_vm(instance)


def _forget(instance: InstanceDoc, now: datetime, note: str) -> None:
    """CLOSED/TERMINATED, and the user's stopped slot free."""
    store = deps.store()
    store.update_instance(instance.name, lambda current: _terminated(current, now, note))
    _free_stopped_slot(instance, now)


def _free_stopped_slot(instance: InstanceDoc, now: datetime) -> None:
    deps.store().update_user(
        instance.user, lambda current: free_slot(current, "stopped_instances", instance.name, now)
    )


def _terminated(instance: InstanceDoc, now: datetime, note: str) -> InstanceDoc:
    if instance.status == InstanceStatus.CLOSED:
        return stop_ended(instance, now, note)
    return instance_closed(instance, now, note)  # it never got to STOPPED
