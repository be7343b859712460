"""Reusing a VM of the user's for a job: a cooling one (still running, no
gear-up) or a stopped one (restarted), and the active-instances slots every
VM of a job holds, which a cooling VM gives way to.

Each claim is a guarded write with one winner; a redelivery finds the VM its
first delivery claimed (by the instance document) and hands it the job again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from spotline.functions.deps import Deps
from spotline.functions.ops.event_tokens import issue_event_token
from spotline.functions.ops.slots import (
    free_instance_slot,
    free_stopped_slot,
    holds_instance_slots,
    instance_quota_reason,
    take_instance_slots,
)
from spotline.functions.ops.teardown import charge_claimed, end_cooling, release_instance
from spotline.shared import logs
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.cluster import gang_port
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.cooling import claim, claimable
from spotline.shared.domain.documents import InstanceDoc, JobDoc, UserDoc
from spotline.shared.domain.errors import CapacityError, PermanentError, SpotlineError
from spotline.shared.domain.liveness import Owner
from spotline.shared.domain.placement import (
    Option,
    held_vm,
    node_names,
    parse_machine_id,
    vm_name,
)
from spotline.shared.domain.quotas import holds, take_slots
from spotline.shared.domain.restore_gate import gate_value
from spotline.shared.domain.secret_env import reads_secrets
from spotline.shared.domain.states import InstanceStatus
from spotline.shared.domain.stopping import restartable, restarted, restarted_for
from spotline.shared.domain.vms import (
    EVENT_TOKEN_METADATA_KEY,
    JOB_METADATA_KEY,
    RESTORE_GO,
    RESTORE_METADATA_KEY,
    Vm,
)
from spotline.shared.topics import vm_topics_for

Found = tuple[list[Vm], Option]
Single = tuple[Vm, Option]


class OverInstanceQuota(SpotlineError):
    """The user's active-instances quota is full: the job waits for quota."""


def assignment_for(deps: Deps, job: JobDoc) -> Assignment:
    """What a VM is told (its metadata): the job, where to save, how to reach its peers."""
    settings = deps.settings
    prefix = settings.job_prefix(job.job_id, job.user)
    nodes: list[str] = []
    if job.spec.nodes > 1:
        # A gang that replaced a node names it in its node list (node_replacement).
        nodes = list(job.nodes) or node_names(job.job_id, job.attempt, job.spec.nodes)
    return Assignment(
        nodes=nodes,
        hosts=gang_hosts(deps, nodes),
        master_port=gang_port(job.job_id, job.attempt, job.gang_generation) if nodes else 0,
        generation=job.gang_generation,
        job_id=job.job_id,
        attempt=job.attempt,
        project=settings.project,
        spec=job.spec,
        checkpoint_dir=f"{prefix}/checkpoints",
        output_dir=f"{prefix}/outputs",
        heartbeat_s=settings.heartbeat_s,
        record=job.record,
        topics=vm_topics_for(job.user, settings.user_topics),
    )


def gang_hosts(deps: Deps, nodes: Sequence[str]) -> list[str]:
    """How a gang's ``nodes`` reach each other: by VM name (internal DNS);
    local "VMs" share loopback."""
    return ["127.0.0.1"] * len(nodes) if deps.settings.compute_endpoint else list(nodes)


# -- the active-instances quota: a cooling VM gives way to a job that needs its slot --


def hold_instance_slots(deps: Deps, job: JobDoc, names: Sequence[str], now: datetime) -> None:
    """Hold a slot for each of the VMs ``names`` (all or none), ending cooling
    VMs of the user to make room. A cooling VM is a bet that the user's next
    job wants it; a job that needs the slot wins the bet off: the user's
    cooling VMs end early, oldest first, rather than make the job wait.

    Raises:
        OverInstanceQuota: no room, and no cooling VM left to end.

    The job's own earlier attempt's VMs, still being deleted, count in the
    list but not against the job's next VMs (``restore_gate.earlier_slots``):
    the next attempt never waits for the lost one's deletes.
    """
    for _ in range(deps.settings.max_active_instances + 1):  # each round ends one, or gives up
        user = take_instance_slots(deps, job, names, now, overlap=True)
        if holds_instance_slots(user, names):
            return
        if not _end_a_cooling_vm(deps, user, job, names, now):
            break
    raise OverInstanceQuota(instance_quota_reason(deps, user))


def hold_restart_slot(deps: Deps, job: JobDoc, name: str, now: datetime) -> bool:
    """Take the slot of the user's stopped VM ``name`` for its restart,
    ending cooling VMs to make room as ``hold_instance_slots`` does. False:
    the name holds a slot already, and this call did not take it.

    A stopped VM's name holds an active slot only while a restart of it is
    under way (or died part-way): another job of the user may be between
    taking it and claiming the instance. Taking that slot for this job too
    lets two jobs hold one slot, and the one that loses the claim frees it
    under the winner; so a restart takes a slot that it adds, or none.

    Raises:
        OverInstanceQuota: no room, and no cooling VM left to end.
    """
    limit = deps.settings.max_active_instances
    took: list[bool] = []  # whether the change last asked (the one written) added it

    def add(current: UserDoc) -> UserDoc:
        took.clear()
        if holds(current, "active_instances", name):
            return current
        taken = take_slots(current, "active_instances", [name], limit, now)
        took.append(holds(taken, "active_instances", name))
        return taken

    for _ in range(limit + 1):  # each round ends one cooling VM, or gives up
        user = deps.store.update_user(job.user, add)
        if took == [True]:
            return True
        if holds_instance_slots(user, [name]):
            return False
        if not _end_a_cooling_vm(deps, user, job, [name], now):
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


def claim_cooling(
    deps: Deps,
    job: JobDoc,
    machine_ids: list[str],
    now: datetime,
    of_job: Sequence[InstanceDoc] | None = None,
) -> Single | None:
    """Take a cooling VM of the job's user for one of its machine ids, in the
    job's order, and hand it the job through its metadata. None: none to take.

    ``of_job``: the job's instance documents, when the caller has read them
    (placement reads them once for this and ``claim_stopped``)."""
    store, settings = deps.store, deps.settings
    for instance in _of_job(deps, job, of_job):
        if instance.attempt == job.attempt and instance.status == InstanceStatus.EXECUTING:
            # Claimed already (a redelivery): charge and hand it the job again,
            # both idempotent.
            charge_claimed(deps, instance, now)
            _assign(deps, job, instance)
            return held_vm(instance, load_catalog())
    zones = set(job.spec.zones or settings.zones)
    # Only the user's: another user's cooling VM is never claimable.
    mine = store.list_instances([InstanceStatus.COOLING], user=job.user)
    cooling = [i for i in mine if i.zone in zones]
    for machine_id in machine_ids:
        for instance in cooling:
            if not _can_serve(instance, job):
                continue
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


def claim_stopped(
    deps: Deps,
    job: JobDoc,
    machine_ids: list[str],
    now: datetime,
    of_job: Sequence[InstanceDoc] | None = None,
) -> Single | None:
    """Restart a stopped VM of the job's user for one of its machine ids, in
    the job's order, with the job in its metadata. None: none to restart.

    The restart claims the instance document first (a guarded write, one
    winner), then hands the VM the job and starts it. ``of_job``: as for
    ``claim_cooling``."""
    store = deps.store
    own_name = vm_name(job.job_id, job.attempt)
    for instance in _of_job(deps, job, of_job):
        if restarted_for(instance, job.job_id, job.attempt, own_name):
            return _boot(deps, job, instance, now)  # a redelivery: boot it again, idempotently
    zones = set(job.spec.zones or deps.settings.zones)
    candidates = [i for i in store.stopped_instances(user=job.user) if i.zone in zones]
    for machine_id in machine_ids:
        for instance in candidates:
            if not _can_serve(instance, job):
                continue
            if not restartable(instance, job.user, machine_id, now):
                continue
            if not hold_restart_slot(deps, job, instance.name, now):
                continue  # another job is restarting it (or a restart died: the reaper frees it)
            won = store.update_instance(
                instance.name, lambda current: restarted(current, job.job_id, job.attempt, now)
            )
            if won is None or not restarted_for(won, job.job_id, job.attempt, own_name):
                # Not restartable any more (its period ran out, it was
                # deleted): the slot this call took is nobody's.
                free_instance_slot(deps, job.user, instance.name, now)
                continue
            free_stopped_slot(deps, won.user, won.name, now)
            found = _boot(deps, job, won, now)
            if found is not None:
                return found
    return None


def _of_job(deps: Deps, job: JobDoc, of_job: Sequence[InstanceDoc] | None) -> Sequence[InstanceDoc]:
    """The job's instance documents: a redelivery finds there the VM its first
    delivery claimed or restarted."""
    return of_job if of_job is not None else deps.store.instances_of_job(job.job_id)


def _can_serve(instance: InstanceDoc, job: JobDoc) -> bool:
    """A VM's scopes are set when it is created: one made for a job without
    Secret Manager references cannot read the secrets of one with them."""
    return instance.reads_secrets or not reads_secrets(job.spec.env)


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
    """The agent idling on the VM wakes on this metadata change; the job and
    its attempt's event token arrive in one change (one setMetadata)."""
    machine = load_catalog().get(parse_machine_id(instance.machine_id)[0])
    gpus = machine.gpu_count if machine else 0
    assignment = assignment_for(deps, job).model_copy(update={"gpus": gpus}).model_dump_json()
    token = issue_event_token(deps, job)
    # A reused VM restores as a new one does: after the lost attempt's save.
    gate = gate_value(job, deps.store.instances_of_job(job.job_id), deps.clock())
    items = {
        JOB_METADATA_KEY: assignment,
        EVENT_TOKEN_METADATA_KEY: token,
        RESTORE_METADATA_KEY: gate or RESTORE_GO,
    }
    deps.compute.set_metadata(instance.zone, instance.name, items)
