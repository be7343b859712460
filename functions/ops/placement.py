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

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from functions.deps import Deps
from functions.ops.queue import fail_unplaceable, wait_for_capacity, wait_for_quota
from functions.ops.slots import (
    free_instance_slot,
    free_stopped_slot,
    holds_instance_slots,
    instance_quota_reason,
    keep_instance_slot,
    take_instance_slots,
)
from functions.ops.teardown import charge_claimed, end_cooling, release_instance
from shared import logs
from shared.contract.assignment import Assignment
from shared.contract.cluster import master_port
from shared.domain.catalog import load_catalog
from shared.domain.cooling import claim, claimable
from shared.domain.documents import InstanceDoc, JobDoc, UserDoc
from shared.domain.errors import CapacityError, PermanentError, SpotlineError, Unplaceable
from shared.domain.lifecycle import vm_recorded
from shared.domain.liveness import Owner
from shared.domain.placement import (
    Option,
    build_gang_request,
    build_vm_request,
    effective_machine_ids,
    held_vm,
    node_names,
    option_of,
    options,
    refusal_summary,
    vm_name,
)
from shared.domain.states import InstanceStatus
from shared.domain.stopping import restartable, restarted, restarted_for
from shared.domain.vms import JOB_METADATA_KEY, Vm

Found = tuple[list[Vm], Option]
Single = tuple[Vm, Option]


class OverInstanceQuota(SpotlineError):
    """The user's active-instances quota is full: the job waits for quota."""


def launch(deps: Deps, job: JobDoc, now: datetime) -> JobDoc:
    """Create (or adopt, or reuse) the attempt's VMs and record them; queue the
    job when no option has capacity or the user is over quota; FAIL it when no
    option can ever succeed (the caller settles it). The job must be in
    REQUESTING_SERVER."""
    tried: list[str] = []
    try:
        found = _find_vms(deps, job, now, tried)
    except OverInstanceQuota as over:
        return wait_for_quota(deps, job, now, str(over))
    except Unplaceable as refused:
        return fail_unplaceable(deps, job.job_id, str(refused), now) or job
    if found is None:
        return wait_for_capacity(deps, job, now, tried)
    vms, option = found
    for vm in vms:
        _record_instance(deps, job, vm, option, now)
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
        ),
    )
    deps.store.delete_queue(job.job_id)
    return recorded or job


def assignment_for(deps: Deps, job: JobDoc) -> Assignment:
    """What a VM is told (its metadata): the job, where to save, how to reach its peers."""
    settings = deps.settings
    prefix = settings.job_prefix(job.job_id)
    nodes = node_names(job.job_id, job.attempt, job.spec.nodes) if job.spec.nodes > 1 else []
    # Nodes reach each other by VM name (internal DNS); local "VMs" share loopback.
    hosts = ["127.0.0.1"] * len(nodes) if settings.compute_endpoint else list(nodes)
    return Assignment(
        nodes=nodes,
        hosts=hosts,
        master_port=master_port(job.job_id, job.attempt) if nodes else 0,
        job_id=job.job_id,
        attempt=job.attempt,
        project=settings.project,
        spec=job.spec,
        checkpoint_dir=f"{prefix}/checkpoints",
        output_dir=f"{prefix}/outputs",
        heartbeat_s=settings.heartbeat_s,
    )


def _find_vms(deps: Deps, job: JobDoc, now: datetime, tried: list[str]) -> Found | None:
    """The attempt's VMs: already there, a cooling or stopped one of the user's,
    or new. None: no option had capacity (``tried`` says why).

    Raises:
        OverInstanceQuota: a new or restarted VM would put the user over quota.
        Unplaceable: no option can ever succeed.
    """
    if job.spec.nodes > 1:
        return _existing_gang(deps, job) or _create_gang(deps, job, tried, now)
    machine_ids = _machine_ids(job)
    single = _existing_vm(deps, job) or claim_cooling(deps, job, machine_ids, now)
    single = single or claim_stopped(deps, job, machine_ids, now)
    single = single or _create_vm(deps, job, tried, now)
    return ([single[0]], single[1]) if single else None


def _machine_ids(job: JobDoc) -> list[str]:
    return effective_machine_ids(
        job.spec.machine_ids, job.avoid_machine_ids, job.spec.on_demand_fallback
    )


# -- new VMs --


def _existing_vm(deps: Deps, job: JobDoc) -> Single | None:
    labels = {"spotline-job": job.job_id, "spotline-attempt": str(job.attempt)}
    for vm in deps.compute.list(labels):
        option = option_of(vm.labels, vm.zone, load_catalog())
        if option is not None and vm.name == vm_name(job.job_id, job.attempt):
            return vm, option
    return None


def _create_vm(deps: Deps, job: JobDoc, tried: list[str], now: datetime) -> Single | None:
    settings = deps.settings
    assignment = assignment_for(deps, job)
    zones = job.spec.zones or list(settings.zones)
    name = vm_name(job.job_id, job.attempt)
    choices = list(options(_machine_ids(job), zones, load_catalog()))
    hold_instance_slots(deps, job, [name], now)
    refused: list[tuple[str, str]] = []
    for option in choices:
        # A new placement pass (the job's history grew) tries with new requestIds.
        request = build_vm_request(
            option, assignment, settings.image, job.user, settings.service_account,
            placement=len(job.history),
        )  # fmt: skip
        try:
            vm = deps.compute.insert(request)
        except CapacityError as err:
            tried.append(f"{option.machine_id} in {option.zone}: {err.reason}")
            _record_request(deps, option.machine_id, ok=False)
            continue
        except Unplaceable as err:  # this option only: another zone or machine may do
            refused.append((f"{option.machine_id} in {option.zone}", err.detail))
            continue
        _record_request(deps, option.machine_id, ok=True)
        return vm, option
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


def _create_gang(deps: Deps, job: JobDoc, tried: list[str], now: datetime) -> Found | None:
    """One bulk insert per machine id, in the user's order; the provider picks
    the one allowed zone that holds every node."""
    settings = deps.settings
    assignment = assignment_for(deps, job)
    zones = job.spec.zones or list(settings.zones)
    names = node_names(job.job_id, job.attempt, job.spec.nodes)
    choices = list(options(_machine_ids(job), zones[:1], load_catalog()))
    hold_instance_slots(deps, job, names, now)
    refused: list[tuple[str, str]] = []
    for option in choices:
        gang = build_gang_request(
            option, assignment, settings.image, job.user, settings.region, zones,
            settings.service_account, placement=len(job.history),
        )  # fmt: skip
        where = f"{job.spec.nodes} x {option.machine_id} in {zones}"
        try:
            vms = deps.compute.insert_gang(gang)
        except CapacityError as err:
            tried.append(f"{where}: {err.reason}")
            _record_request(deps, option.machine_id, ok=False)
            continue
        except Unplaceable as err:
            refused.append((where, err.detail))
            continue
        _record_request(deps, option.machine_id, ok=True)
        return vms, replace(option, zone=vms[0].zone)
    for name in names:
        free_instance_slot(deps, job.user, name, now)
    _wait_or_give_up(tried, refused)
    return None


def _wait_or_give_up(tried: list[str], refused: list[tuple[str, str]]) -> None:
    """No VM: wait for capacity, unless every option was refused for good (then
    waiting cannot help). ``tried`` gains the refusals, for the person.

    Raises:
        Unplaceable: no option can ever succeed.
    """
    if refused and not tried:
        raise Unplaceable(f"Compute Engine refuses every option: {refusal_summary(refused)}")
    tried.extend(f"{where}: {why}" for where, why in refused)


def _record_request(deps: Deps, machine_id: str, ok: bool) -> None:
    """Availability statistics: a failure to record them must not fail a placement."""
    try:
        deps.store.record_request(machine_id, ok, deps.clock())
    except Exception as err:
        logs.warning(f"could not record a request of {machine_id}: {err}")


def _record_instance(deps: Deps, job: JobDoc, vm: Vm, option: Option, now: datetime) -> None:
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
            created_at=now,
            updated_at=now,
        )
    )


# -- the active-instances quota: a cooling VM gives way to a job that needs its slot --


def hold_instance_slots(deps: Deps, job: JobDoc, names: Sequence[str], now: datetime) -> None:
    """Hold a slot for each of the VMs ``names`` (all or none), ending cooling
    VMs of the user to make room. A cooling VM is a bet that the user's next
    job wants it; a job that needs the slot wins the bet off: the user's
    cooling VMs end early, oldest first, rather than make the job wait.

    Raises:
        OverInstanceQuota: no room, and no cooling VM left to end.
    """
    for _ in range(deps.settings.max_active_instances + 1):  # each round ends one, or gives up
        user = take_instance_slots(deps, job, names, now)
        if holds_instance_slots(user, names):
            return
        if not _end_a_cooling_vm(deps, user, job, names, now):
            break
    raise OverInstanceQuota(instance_quota_reason(deps, user))


def _end_a_cooling_vm(
    deps: Deps, user: UserDoc, job: JobDoc, names: Sequence[str], now: datetime
) -> bool:
    """End the oldest of the user's cooling VMs. False: none to end."""
    found = [deps.store.get_instance(name) for name in user.active_instances if name not in names]
    cooling = sorted(
        (i for i in found if i is not None and i.status == InstanceStatus.COOLING),
        key=lambda instance: instance.cooling_since or instance.updated_at,
    )
    note = f"cooling ended early: job {job.job_id} needs its slot"
    return any(end_cooling(deps, instance, now, note) for instance in cooling)


# -- reused VMs: cooling (still running) and stopped (restarted) --


def claim_cooling(deps: Deps, job: JobDoc, machine_ids: list[str], now: datetime) -> Single | None:
    """Take a cooling VM of the job's user for one of its machine ids, in the
    job's order, and hand it the job through its metadata. None: none to take."""
    store, settings = deps.store, deps.settings
    for instance in store.instances_of_job(job.job_id):
        if instance.attempt == job.attempt and instance.status == InstanceStatus.EXECUTING:
            # Claimed already (a redelivery): charge and hand it the job again,
            # both idempotent.
            charge_claimed(deps, instance, now)
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
            charge_claimed(deps, won, now)
            _assign(deps, job, won)
            logs.info(f"job {job.job_id}: reusing cooling instance {won.name}", job_id=job.job_id)
            return held_vm(won, load_catalog())
    return None


def claim_stopped(deps: Deps, job: JobDoc, machine_ids: list[str], now: datetime) -> Single | None:
    """Restart a stopped VM of the job's user for one of its machine ids, in
    the job's order, with the job in its metadata. None: none to restart.

    The restart claims the instance document first (a guarded write, one
    winner), then hands the VM the job and starts it."""
    store = deps.store
    own_name = vm_name(job.job_id, job.attempt)
    for instance in store.instances_of_job(job.job_id):
        if restarted_for(instance, job.job_id, job.attempt, own_name):
            return _boot(deps, job, instance, now)  # a redelivery: boot it again, idempotently
    zones = set(job.spec.zones or deps.settings.zones)
    candidates = [i for i in store.stopped_instances() if i.zone in zones]
    for machine_id in machine_ids:
        for instance in candidates:
            if not restartable(instance, job.user, machine_id, now):
                continue
            hold_instance_slots(deps, job, [instance.name], now)  # running again, it is active
            won = store.update_instance(
                instance.name, lambda current: restarted(current, job.job_id, job.attempt, now)
            )
            if won is None or not restarted_for(won, job.job_id, job.attempt, own_name):
                free_instance_slot(deps, job.user, instance.name, now)
                continue  # another job took it first
            free_stopped_slot(deps, won.user, won.name, now)
            found = _boot(deps, job, won, now)
            if found is not None:
                return found
    return None


def _boot(deps: Deps, job: JobDoc, instance: InstanceDoc, now: datetime) -> Single | None:
    """Hand the VM the job, then start it. None: it cannot start (no capacity
    in its zone now, or it is gone), and it is deleted."""
    try:
        _assign(deps, job, instance)
        deps.compute.start(instance.zone, instance.name)
    except (CapacityError, PermanentError) as err:
        logs.warning(f"{instance.name}: cannot restart ({err}); deleting it")
        note = f"cannot restart: {err}"
        release_instance(deps, instance.name, now, note, owner=Owner.of(job))
        return None
    logs.info(f"job {job.job_id}: restarted stopped instance {instance.name}", job_id=job.job_id)
    return held_vm(instance, load_catalog())


def _assign(deps: Deps, job: JobDoc, instance: InstanceDoc) -> None:
    """The agent idling on the VM wakes on this metadata change."""
    assignment = assignment_for(deps, job).model_dump_json()
    deps.compute.set_metadata(instance.zone, instance.name, {JOB_METADATA_KEY: assignment})
