"""Getting VMs for a job's current attempt, and telling them the job.

In order: the attempt's VMs if they exist already (a redelivery), a cooling VM
of the user's (no gear-up), a stopped VM of the user's (restarted), or new VMs
(one, or a gang in one zone). Shared by submit_job, recovery, the queue's
retries and the reaper.

Re-entrant: a VM already created for this attempt (found by its labels) is
adopted, never duplicated; the VM name and GCE requestId are deterministic per
attempt, so even a racing second caller gets the same VM back; a claimed
cooling VM or a restarted stopped VM is found by its document and handed the
job again, idempotently.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from spotline.functions.deps import Deps
from spotline.functions.ops.event_tokens import issue_event_token
from spotline.functions.ops.gang_rules import allow_gang
from spotline.functions.ops.queue import fail_unplaceable, wait_for_capacity, wait_for_quota
from spotline.functions.ops.reuse import (
    Found,
    OverInstanceQuota,
    Single,
    assignment_for,
    claim_cooling,
    claim_stopped,
    hold_instance_slots,
)
from spotline.functions.ops.slots import (
    free_instance_slot,
    keep_instance_slot,
)
from spotline.functions.ops.teardown import release_instance
from spotline.shared import logs
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.documents import InstanceDoc, JobDoc
from spotline.shared.domain.errors import CapacityError, Unplaceable
from spotline.shared.domain.lifecycle import current_vms, vm_recorded
from spotline.shared.domain.liveness import Owner
from spotline.shared.domain.option_waiting import ask_order, option_index
from spotline.shared.domain.placement import (
    Option,
    build_gang_request,
    build_vm_request,
    effective_machine_ids,
    node_names,
    option_of,
    options,
    refusal_summary,
    vm_name,
)
from spotline.shared.domain.preempted_zones import zone_order
from spotline.shared.domain.queueing import waiting_since
from spotline.shared.domain.restore_gate import gate_value
from spotline.shared.domain.secret_env import reads_secrets
from spotline.shared.domain.states import JobStatus
from spotline.shared.domain.tenancy import vm_account
from spotline.shared.domain.vms import Vm


def launch(deps: Deps, job: JobDoc, now: datetime) -> JobDoc:
    """Create (or adopt, or reuse) the attempt's VMs and record them; queue the
    job when no option has capacity or the user is over quota; FAIL it when no
    option can ever succeed (the caller settles it). The job must be in
    REQUESTING_SERVER."""
    tried: list[str] = []
    made: set[str] = set()  # VMs this call created, their slots taken just before
    try:
        found = _find_vms(deps, job, now, tried, made)
    except OverInstanceQuota as over:
        return wait_for_quota(deps, job, now, str(over))
    except Unplaceable as refused:
        return fail_unplaceable(deps, job.job_id, str(refused), now) or job
    if found is None:
        return wait_for_capacity(deps, job, now, tried)
    vms, option = found
    for vm in vms:
        record_instance(deps, job, vm, option, now, slot_taken=vm.name in made)
    leader = vms[0]
    names = [vm.name for vm in vms] if len(vms) > 1 else None
    logs.info(
        f"job {job.job_id}: attempt {job.attempt} on {', '.join(vm.name for vm in vms)} "
        f"({option.machine_id}, {leader.zone})",
        job_id=job.job_id,
        instance=leader.name,
    )
    recorded = deps.store.update_job(
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
            node_ids=[vm.id or "" for vm in vms],
        ),
    )
    deps.store.delete_queue(job.job_id)
    if recorded is not None and recorded.status in JobStatus.terminal():
        _let_go(deps, recorded, job.attempt, vms, now)
    return recorded or job


def _let_go(deps: Deps, ended: JobDoc, attempt: int, vms: list[Vm], now: datetime) -> None:
    """The job ended while its attempt's VMs were being made (a cancel came
    between the insert and the write above): delete the VMs it does not run
    on, charged to it (``spotline.shared.domain.unrecorded_vms``), now rather than a
    reaper's sweep later. Only while this attempt holds their instances."""
    note = f"job {ended.status.lower()} while its VM was being made"
    for vm in vms:
        if vm.name not in current_vms(ended):
            release_instance(deps, vm.name, now, note, owner=Owner(ended.job_id, attempt))


def _find_vms(
    deps: Deps, job: JobDoc, now: datetime, tried: list[str], made: set[str]
) -> Found | None:
    """The attempt's VMs: already there, a cooling or stopped one of the user's,
    or new (their names go into ``made``). None: no option had capacity
    (``tried`` says why).

    Raises:
        OverInstanceQuota: a new or restarted VM would put the user over quota.
        Unplaceable: no option can ever succeed.
    """
    if job.spec.nodes > 1:
        return _existing_gang(deps, job) or _create_gang(deps, job, tried, now, made)
    machine_ids = _machine_ids(job)
    single = _existing_vm(deps, job)
    if single is None:
        # A claimed cooling VM and a restarted stopped one are both found by
        # the job's instance documents: one query serves both looks.
        of_job = deps.store.instances_of_job(job.job_id)
        single = claim_cooling(deps, job, machine_ids, now, of_job)
        single = single or claim_stopped(deps, job, machine_ids, now, of_job)
    single = single or _create_vm(deps, job, tried, now, made)
    return ([single[0]], single[1]) if single else None


def vm_account_of(deps: Deps, job: JobDoc) -> str | None:
    """The service account the job's VMs run as: its user's own in the per-user
    mode (``spotline.shared.domain.tenancy``), never one the spec names."""
    settings = deps.settings
    return vm_account(job.user, settings.project, settings.user_topics, settings.service_account)


def _zones(deps: Deps, job: JobDoc, now: datetime) -> list[str]:
    """The allowed zones, those the job was just preempted in last
    (``avoid_preempted_zone_s``)."""
    zones = job.spec.zones or list(deps.settings.zones)
    return zone_order(zones, job.attempts, job.spec.avoid_preempted_zone_s, now)


def _machine_ids(job: JobDoc) -> list[str]:
    return effective_machine_ids(
        job.spec.machine_ids, job.avoid_machine_ids, job.spec.on_demand_fallback
    )


def _ask_order(deps: Deps, job: JobDoc, now: datetime) -> list[str]:
    """The machine ids of this pass, the one whose ``wait_request_s`` window
    ``now`` is in first (``spotline.shared.domain.option_waiting``); the others follow
    for when it is refused for good, or with ``wait_request_s`` 0."""
    machine_ids = _machine_ids(job)
    since = waiting_since(deps.store.get_queue(job.job_id), job.attempt)
    index = option_index(since, now, job.spec.wait_request_s, len(machine_ids))
    return ask_order(machine_ids, index)


# -- new VMs --


def _existing_vm(deps: Deps, job: JobDoc) -> Single | None:
    labels = {"spotline-job": job.job_id, "spotline-attempt": str(job.attempt)}
    for vm in deps.compute.list(labels):
        option = option_of(vm.labels, vm.zone, load_catalog())
        if option is not None and vm.name == vm_name(job.job_id, job.attempt):
            return vm, option
    return None


def _create_vm(
    deps: Deps, job: JobDoc, tried: list[str], now: datetime, made: set[str]
) -> Single | None:
    settings = deps.settings
    assignment = assignment_for(deps, job)
    zones = _zones(deps, job, now)
    name = vm_name(job.job_id, job.attempt)
    groups = [list(options([m], zones, load_catalog())) for m in _ask_order(deps, job, now)]
    hold_instance_slots(deps, job, [name], now)
    token = issue_event_token(deps, job)
    gate = _restore_gate(deps, job, now)
    refused: list[tuple[str, str]] = []
    for choices in groups:
        for option in choices:
            # A new placement pass (the job's history grew) tries with new requestIds.
            request = build_vm_request(
                option, assignment, settings.image, job.user, vm_account_of(deps, job),
                placement=len(job.history), event_token=token, restore_gate=gate,
            )  # fmt: skip
            try:
                vm = deps.compute.insert(request)
            except CapacityError as err:
                tried.append(f"{option.machine_id} in {option.zone}: {err.reason}")
                record_request(deps, option.machine_id, ok=False)
                continue
            except Unplaceable as err:  # this option only: another zone or machine may do
                refused.append((f"{option.machine_id} in {option.zone}", err.detail))
                continue
            record_request(deps, option.machine_id, ok=True)
            made.add(vm.name)
            return vm, option
        if tried and job.spec.wait_request_s > 0:
            break  # no capacity for the option whose window this is: wait for it
    free_instance_slot(deps, job.user, name, now)  # no VM: a waiting job holds no slot
    _wait_or_give_up(tried, refused)
    return None


def _existing_gang(deps: Deps, job: JobDoc) -> Found | None:
    labels = {"spotline-job": job.job_id, "spotline-attempt": str(job.attempt)}
    found = {vm.name: vm for vm in deps.compute.list(labels)}
    names = node_names(job.job_id, job.attempt, job.spec.nodes)
    if not all(name in found for name in names):
        return None
    vms = [found[name] for name in names]
    option = option_of(vms[0].labels, vms[0].zone, load_catalog())
    return (vms, option) if option is not None else None


def _create_gang(
    deps: Deps, job: JobDoc, tried: list[str], now: datetime, made: set[str]
) -> Found | None:
    """One bulk insert per machine id, in the user's order; the provider picks
    the one allowed zone that holds every node."""
    settings = deps.settings
    assignment = assignment_for(deps, job)
    zones = _zones(deps, job, now)
    names = node_names(job.job_id, job.attempt, job.spec.nodes)
    choices = list(options(_ask_order(deps, job, now), zones[:1], load_catalog()))
    # Before any node exists: a node that boots before its rule finds its peers unreachable.
    allow_gang(deps, job)
    hold_instance_slots(deps, job, names, now)
    token = issue_event_token(deps, job)  # one for every node
    gate = _restore_gate(deps, job, now)
    refused: list[tuple[str, str]] = []
    for option in choices:
        if tried and job.spec.wait_request_s > 0:
            break  # no capacity for the option whose window this is: wait for it
        gang = build_gang_request(
            option, assignment, settings.image, job.user, settings.region, zones,
            vm_account_of(deps, job), placement=len(job.history), event_token=token,
            restore_gate=gate,
        )  # fmt: skip
        where = f"{job.spec.nodes} x {option.machine_id} in {zones}"
        try:
            vms = deps.compute.insert_gang(gang)
        except CapacityError as err:
            tried.append(f"{where}: {err.reason}")
            record_request(deps, option.machine_id, ok=False)
            continue
        except Unplaceable as err:
            refused.append((where, err.detail))
            continue
        record_request(deps, option.machine_id, ok=True)
        made.update(vm.name for vm in vms)
        return vms, replace(option, zone=vms[0].zone)
    for name in names:
        free_instance_slot(deps, job.user, name, now)
    _wait_or_give_up(tried, refused)
    return None


def _restore_gate(deps: Deps, job: JobDoc, now: datetime) -> str | None:
    """The new VMs' restore gate, when a VM of an earlier attempt may still be
    saving (``spotline.shared.domain.restore_gate``). Its delete is not waited
    for; the recovery that deletes it opens the gate. A first attempt has no
    earlier VM: nothing to read."""
    if job.attempt <= 1:
        return None
    return gate_value(job, deps.store.instances_of_job(job.job_id), now)


def _wait_or_give_up(tried: list[str], refused: list[tuple[str, str]]) -> None:
    """No VM: wait for capacity, unless every option was refused for good (then
    waiting cannot help). ``tried`` gains the refusals, for the person.

    Raises:
        Unplaceable: no option can ever succeed.
    """
    if refused and not tried:
        raise Unplaceable(f"Compute Engine refuses every option: {refusal_summary(refused)}")
    tried.extend(f"{where}: {why}" for where, why in refused)


def record_request(deps: Deps, machine_id: str, ok: bool) -> None:
    """Availability statistics: a failure to record them must not fail a placement."""
    try:
        deps.store.record_request(machine_id, ok, deps.clock())
    except Exception as err:
        logs.warning(f"could not record a request of {machine_id}: {err}")


def record_instance(
    deps: Deps, job: JobDoc, vm: Vm, option: Option, now: datetime, slot_taken: bool
) -> None:
    """The instance document; and the VM's slot, unless this call took it
    before creating the VM (an adopted, claimed or restarted VM keeps its
    slot whatever the limit, so the user's list stays true)."""
    if not slot_taken:
        keep_instance_slot(deps, job.user, vm.name, now)
    deps.store.create_instance(
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
            reads_secrets=reads_secrets(job.spec.env),
            vm_created_at=vm.created_at,
            created_at=now,
            updated_at=now,
        )
    )
