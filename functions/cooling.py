"""Reusing and ending cooling instances (see ``shared.cooling``)."""

from __future__ import annotations

from datetime import datetime

from functions import deps
from functions.assignments import assignment_for
from shared import logs
from shared.catalog import load_catalog
from shared.compute.port import JOB_METADATA_KEY, Vm, VmState
from shared.cooling import charge, claim, claimable
from shared.documents import InstanceDoc, JobDoc
from shared.lifecycle import accrue
from shared.placement import Option, parse_machine_id
from shared.states import InstanceStatus


def claim_cooling(job: JobDoc, machine_ids: list[str], now: datetime) -> tuple[Vm, Option] | None:
    """Take a cooling VM of the job's user for one of its machine ids, in the
    job's order, and hand it the job through its metadata. None: none to take."""
    store, settings = deps.store(), deps.settings()
    for instance in store.instances_of_job(job.job_id):
        if instance.attempt == job.attempt and instance.status == InstanceStatus.EXECUTING:
            # Claimed already (a redelivery): charge and hand it the job again,
            # both idempotent.
            _charge_claimed(instance, now)
            _assign(job, instance)
            return reused_vm(instance)
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
            _charge_claimed(won, now)
            _assign(job, won)
            logs.info(f"job {job.job_id}: reusing cooling instance {won.name}", job_id=job.job_id)
            return reused_vm(won)
    return None


def charge_cooling(instance: InstanceDoc, now: datetime) -> None:
    """Charge a cooling instance's period so far to the job that left it cooling
    (before the instance closes: a crash in between leaves it cooling, and the
    next sweep charges again, idempotently)."""
    _charge(instance.job_id, instance.name, instance.cooling_cost_usd, now)


def _charge_claimed(instance: InstanceDoc, now: datetime) -> None:
    """A claim closed the period: charge it to the job the VM cooled for."""
    if instance.cooled_for_job:
        _charge(instance.cooled_for_job, instance.name, instance.cooling_cost_usd, now)


def _charge(job_id: str, instance_name: str, cost_usd: float, now: datetime) -> None:
    if cost_usd <= 0:
        return
    deps.store().update_job(job_id, lambda job: accrue(charge(job, instance_name, cost_usd), now))


def _assign(job: JobDoc, instance: InstanceDoc) -> None:
    """The agent idling on the VM wakes on this metadata change."""
    assignment = assignment_for(job).model_dump_json()
    deps.compute().set_metadata(instance.zone, instance.name, {JOB_METADATA_KEY: assignment})


def reused_vm(instance: InstanceDoc) -> tuple[Vm, Option]:
    """A VM spotline already holds (cooling, or stopped and restarted), as a
    placement answers it."""
    name, provisioning = parse_machine_id(instance.machine_id)
    option = Option(machine=load_catalog()[name], provisioning=provisioning, zone=instance.zone)
    vm = Vm(
        name=instance.name,
        zone=instance.zone,
        state=VmState.RUNNING,
        labels={},
        machine_type=instance.machine_type,
        id=instance.instance_id or "",
    )
    return vm, option
