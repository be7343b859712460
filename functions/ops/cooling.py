"""Reusing and ending cooling instances (see ``shared.domain.cooling``)."""

from __future__ import annotations

from datetime import datetime

from functions.deps import Deps
from functions.ops.assignments import assignment_for
from functions.ops.release import release_instance
from functions.ops.stopped import free_stopped_slot, stop_instance, take_stop_slot
from shared import logs
from shared.domain.catalog import load_catalog
from shared.domain.cooling import charge, claim, claimable, close_segment, while_cooling
from shared.domain.documents import InstanceDoc, JobDoc
from shared.domain.lifecycle import accrue, instance_closing
from shared.domain.placement import Option, held_vm
from shared.domain.states import InstanceStatus, InstanceSubstatus
from shared.domain.stopping import stopping
from shared.domain.vms import JOB_METADATA_KEY, Vm


def claim_cooling(
    deps: Deps, job: JobDoc, machine_ids: list[str], now: datetime
) -> tuple[Vm, Option] | None:
    """Take a cooling VM of the job's user for one of its machine ids, in the
    job's order, and hand it the job through its metadata. None: none to take."""
    store, settings = deps.store, deps.settings
    for instance in store.instances_of_job(job.job_id):
        if instance.attempt == job.attempt and instance.status == InstanceStatus.EXECUTING:
            # Claimed already (a redelivery): charge and hand it the job again,
            # both idempotent.
            _charge_claimed(deps, instance, now)
            _assign(deps, job, instance)
            return held_vm(instance, load_catalog())
    zones = set(job.spec.zones or settings.zones)
    cooling = [i for i in store.list_instances([InstanceStatus.COOLING]) if i.zone in zones]
    for machine_id in machine_ids:
        for instance in cooling:
            if not claimable(instance, job.user, machine_id, now):
                continue
            won = store.update_instance(
                instance.name,
                lambda current: claim(current, job.job_id, job.attempt, now, settings.cooling_rule),
            )
            if won is None or won.job_id != job.job_id or won.attempt != job.attempt:
                continue  # another job claimed it first
            _charge_claimed(deps, won, now)
            _assign(deps, job, won)
            logs.info(f"job {job.job_id}: reusing cooling instance {won.name}", job_id=job.job_id)
            return held_vm(won, load_catalog())
    return None


def end_cooling(deps: Deps, instance: InstanceDoc, now: datetime, note: str) -> bool:
    """End a cooling period before a job claims the VM: charge it to the job
    that left the VM cooling, close the instance, then stop or delete the VM.

    The instance is closed with a guarded write that only moves a COOLING one,
    so a job claiming the VM at that moment wins or loses whole. False: a job
    claimed it first, and it runs on.
    """
    store, rule = deps.store, deps.settings.cooling_rule
    charge_cooling(deps, while_cooling(instance, now, rule), now)
    period_s = take_stop_slot(deps, instance, now)  # None: delete it

    def close(current: InstanceDoc) -> InstanceDoc:
        if current.status != InstanceStatus.COOLING:
            return current
        priced = close_segment(current, now, rule)  # at the cooling price, escalated
        if period_s is None:
            return instance_closing(priced, now, note)
        return stopping(priced, now, note)

    closing = store.update_instance(instance.name, close)
    if closing is None or closing.status != InstanceStatus.CLOSING:
        if period_s is not None:
            free_stopped_slot(deps, instance.user, instance.name, now)
        return False
    if period_s is not None and closing.substatus == InstanceSubstatus.STOPPING:
        stop_instance(deps, closing, period_s, now, note)
    else:
        release_instance(deps, instance.name, now, note)
    return True


def charge_cooling(deps: Deps, instance: InstanceDoc, now: datetime) -> None:
    """Charge a cooling instance's period so far to the job that left it cooling
    (before the instance closes: a crash in between leaves it cooling, and the
    next sweep charges again, idempotently)."""
    _charge(deps, instance.job_id, instance.name, instance.cooling_cost_usd, now)


def _charge_claimed(deps: Deps, instance: InstanceDoc, now: datetime) -> None:
    """A claim closed the period: charge it to the job the VM cooled for."""
    if instance.cooled_for_job:
        _charge(deps, instance.cooled_for_job, instance.name, instance.cooling_cost_usd, now)


def _charge(deps: Deps, job_id: str, instance_name: str, cost_usd: float, now: datetime) -> None:
    if cost_usd <= 0:
        return
    deps.store.update_job(job_id, lambda job: accrue(charge(job, instance_name, cost_usd), now))


def _assign(deps: Deps, job: JobDoc, instance: InstanceDoc) -> None:
    """The agent idling on the VM wakes on this metadata change."""
    assignment = assignment_for(deps, job).model_dump_json()
    deps.compute.set_metadata(instance.zone, instance.name, {JOB_METADATA_KEY: assignment})
