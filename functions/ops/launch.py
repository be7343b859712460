"""Getting a VM for a job's current attempt: shared by submit_job and the reaper.

Re-entrant: a VM already created for this attempt (found by its labels) is
adopted, never duplicated; the VM name and GCE requestId are deterministic per
attempt, so even a racing second caller gets the same VM back.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from functions import deps
from functions.ops.assignments import assignment_for
from functions.ops.cooling import claim_cooling
from functions.ops.instance_slots import OverInstanceQuota, keep_instance_slot, take_instance_slots
from functions.ops.release import free_instance_slot
from functions.ops.restart import claim_stopped
from functions.ops.waiting import wait_for_capacity, wait_for_quota
from shared import logs
from shared.domain.catalog import load_catalog
from shared.domain.documents import InstanceDoc, JobDoc
from shared.domain.errors import CapacityError
from shared.domain.lifecycle import vm_recorded
from shared.domain.placement import (
    Option,
    build_gang_request,
    build_vm_request,
    effective_machine_ids,
    node_names,
    option_of,
    options,
    vm_name,
)
from shared.domain.vms import Vm


def launch(job: JobDoc, now: datetime) -> JobDoc:
    """Create (or adopt) the attempt's VM and record it; queue the job when no
    option has capacity. The job must be in REQUESTING_SERVER."""
    tried: list[str] = []
    try:
        found = _find_vms(job, now, tried)
    except OverInstanceQuota as over:
        return wait_for_quota(job, now, str(over))
    if found is None:
        return wait_for_capacity(job, now, tried)
    vms, option = found
    for vm in vms:
        _record_instance(job, vm, option, now)
    leader = vms[0]
    names = [vm.name for vm in vms] if len(vms) > 1 else None
    logs.info(
        f"job {job.job_id}: attempt {job.attempt} on {', '.join(vm.name for vm in vms)} "
        f"({option.machine_id}, {leader.zone})",
        job_id=job.job_id,
        instance=leader.name,
    )
    recorded = deps.store().update_job(
        job.job_id,
        lambda current: vm_recorded(
            current,
            leader.name,
            leader.zone,
            option.machine_id,
            now,
            option.price_per_hour,
            option.machine.on_demand_usd_per_hour,
            leader.id or None,
            nodes=names,
        ),
    )
    deps.store().delete_queue(job.job_id)
    return recorded or job


def _find_vms(job: JobDoc, now: datetime, tried: list[str]) -> tuple[list[Vm], Option] | None:
    """The attempt's VMs: already there, a cooling or stopped one of the user's,
    or new. None: no option had capacity (``tried`` says why).

    Raises:
        OverInstanceQuota: a new or restarted VM would put the user over quota.
    """
    if job.spec.nodes > 1:
        return _existing_gang(job) or _create_gang(job, tried, now)
    machine_ids = _machine_ids(job)
    single = _existing_vm(job) or claim_cooling(job, machine_ids, now)
    single = single or claim_stopped(job, machine_ids, now) or _create_vm(job, tried, now)
    return ([single[0]], single[1]) if single else None


def _existing_vm(job: JobDoc) -> tuple[Vm, Option] | None:
    labels = {"spotline-job": job.job_id, "spotline-attempt": str(job.attempt)}
    for vm in deps.compute().list(labels):
        option = option_of(vm.labels, vm.zone, load_catalog())
        if option is not None and vm.name == vm_name(job.job_id, job.attempt):
            return vm, option
    return None


def _create_vm(job: JobDoc, tried: list[str], now: datetime) -> tuple[Vm, Option] | None:
    settings = deps.settings()
    assignment = assignment_for(job)
    zones = job.spec.zones or list(settings.zones)
    name = vm_name(job.job_id, job.attempt)
    take_instance_slots(job, [name], now)
    for option in options(_machine_ids(job), zones, load_catalog()):
        # A new placement pass (the job's history grew) tries with new requestIds.
        request = build_vm_request(
            option, assignment, settings.image, job.user, settings.service_account,
            placement=len(job.history),
        )  # fmt: skip
        try:
            vm = deps.compute().insert(request)
        except CapacityError as err:
            tried.append(f"{option.machine_id} in {option.zone}: {err.reason}")
            _record_request(option.machine_id, ok=False)
            continue
        _record_request(option.machine_id, ok=True)
        return vm, option
    free_instance_slot(job.user, name, now)  # no VM: a waiting job holds no slot
    return None


def _record_request(machine_id: str, ok: bool) -> None:
    """Availability statistics: a failure to record them must not fail a placement."""
    try:
        deps.store().record_request(machine_id, ok, datetime.now(UTC))
    except Exception as err:
        logs.warning(f"could not record a request of {machine_id}: {err}")


def _existing_gang(job: JobDoc) -> tuple[list[Vm], Option] | None:
    labels = {"spotline-job": job.job_id, "spotline-attempt": str(job.attempt)}
    found = {vm.name: vm for vm in deps.compute().list(labels)}
    names = node_names(job.job_id, job.attempt, job.spec.nodes)
    if not all(name in found for name in names):
        return None
    vms = [found[name] for name in names]
    option = option_of(vms[0].labels, vms[0].zone, load_catalog())
    return (vms, option) if option is not None else None


def _create_gang(job: JobDoc, tried: list[str], now: datetime) -> tuple[list[Vm], Option] | None:
    """One bulk insert per machine id, in the user's order; the provider picks
    the one allowed zone that holds every node."""
    settings = deps.settings()
    assignment = assignment_for(job)
    zones = job.spec.zones or list(settings.zones)
    names = node_names(job.job_id, job.attempt, job.spec.nodes)
    take_instance_slots(job, names, now)
    for option in options(_machine_ids(job), zones[:1], load_catalog()):
        gang = build_gang_request(
            option, assignment, settings.image, job.user, settings.region, zones,
            settings.service_account, placement=len(job.history),
        )  # fmt: skip
        try:
            vms = deps.compute().insert_gang(gang)
        except CapacityError as err:
            tried.append(f"{job.spec.nodes} x {option.machine_id} in {zones}: {err.reason}")
            _record_request(option.machine_id, ok=False)
            continue
        _record_request(option.machine_id, ok=True)
        return vms, replace(option, zone=vms[0].zone)
    for name in names:
        free_instance_slot(job.user, name, now)
    return None


def _machine_ids(job: JobDoc) -> list[str]:
    return effective_machine_ids(
        job.spec.machine_ids, job.avoid_machine_ids, job.spec.on_demand_fallback
    )


def _record_instance(job: JobDoc, vm: Vm, option: Option, now: datetime) -> None:
    keep_instance_slot(job.user, vm.name, now)
    deps.store().create_instance(
        InstanceDoc(
            name=vm.name,
            job_id=job.job_id,
            user=job.user,
            attempt=job.attempt,
            machine_id=option.machine_id,
            machine_type=option.machine.machine_type,
            zone=vm.zone,
            provisioning=option.provisioning,
            instance_id=vm.id or None,
            price_per_hour=option.price_per_hour,
            base_price_per_hour=option.price_per_hour,
            on_demand_price_per_hour=option.machine.on_demand_usd_per_hour,
            created_at=now,
            updated_at=now,
        )
    )
