"""Replacing a gang's lost node within its attempt, and regrouping the gang
(``spotline.shared.domain.node_replacement`` decides; this applies).

In order, each step re-entrant: 1. the loss is written on the job (the
caller, ``recovery.recover``); 2. the lost node's instance CLOSING; 3. the
replacement inserted (its slot counted beside the lost node's for the
overlap), made with a shut restore gate: its trainer waits for the regroup;
4. the lost VM deleted, its instance CLOSED; 5. once the replacement has
booted and node 0's save is complete, the regroup written on the job (back
to TRAINING, ``JobDoc.telling``), then every node told the new node list
(``spotline-regroup`` metadata, never over a newer one; the replacement's
gate opened), then the job marked told. A crash anywhere is finished by the
reaper (``tend``): it tells a regroup recorded and not told, inserts a
replacement not made yet, regroups a gang that is ready, and relaunches the
whole gang once ``replace_node_timeout_s`` has passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from functools import partial

from pydantic import ValidationError

from spotline.functions.deps import Deps
from spotline.functions.ops.event_tokens import issue_event_token
from spotline.functions.ops.jobs import settle
from spotline.functions.ops.placement import record_instance, record_request, vm_account_of
from spotline.functions.ops.relaunch import replace_attempt
from spotline.functions.ops.restore_gate import open_restore_gate
from spotline.functions.ops.reuse import (
    OverInstanceQuota,
    assignment_for,
    gang_hosts,
    hold_instance_slots,
)
from spotline.functions.ops.slots import free_instance_slot
from spotline.functions.ops.teardown import (
    Release,
    begin_release,
    delete_released,
    end_release,
    release_instances,
)
from spotline.functions.ops.vm_metadata import write_metadata
from spotline.shared import logs
from spotline.shared.contract.assignment import Regroup
from spotline.shared.contract.cluster import gang_port
from spotline.shared.domain import gang_resize, node_replacement, pending_nodes
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.documents import JobDoc, PendingNode
from spotline.shared.domain.errors import CapacityError, Unplaceable
from spotline.shared.domain.gang_network import gang_tag
from spotline.shared.domain.liveness import Owner
from spotline.shared.domain.placement import (
    Option,
    build_vm_request,
    parse_machine_id,
    request_id,
)
from spotline.shared.domain.restore_gate import gate_value
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from spotline.shared.domain.vms import (
    GANG_STOP_METADATA_KEY,
    REGROUP_METADATA_KEY,
    RESTORE_GO,
    RESTORE_METADATA_KEY,
    RESTORE_WAIT,
    Vm,
)

# The reaper inserts a replacement the recovery did not (it died, or found no
# capacity) only this long after the loss, or after the last insert refused
# for capacity: before, that recovery may still be inserting it, and a second
# insert, though deduplicated by its requestId, is one more call (and one
# more event token written on the job).
REINSERT_AFTER_S = 30.0
# A job's substatus while it replaces a node: the gang waiting, or an
# elastic gang training at a smaller size meanwhile (``gang_resize``).
_REPLACING = (JobSubstatus.REPLACING_NODE, JobSubstatus.TRAINING)


def replace_node(deps: Deps, job: JobDoc, releases: list[Release], now: datetime) -> JobDoc:
    """The loss is on the job (REPLACING_NODE): the lost VM (``releases``:
    none while it is kept through its notice) goes while its replacement is
    inserted, never waiting for the delete; then the gang regroups if it can.
    A failed delete is raised after the insert, for a redelivery or the reaper."""
    releasing = begin_release(deps, releases, now)
    try:
        job = ensure_replacement(deps, job, now)
    finally:
        delete_released(deps, releasing)
        end_release(deps, releasing, now)
    return regroup_if_ready(deps, job.job_id, now) or job


def ensure_replacement(deps: Deps, job: JobDoc, now: datetime) -> JobDoc:
    """Insert each replacement VM unless it exists (its instance document),
    in the gang's zone, on the gang's machine. No capacity: left to the
    reaper's next sweep, until the bound; refused for good, or over the
    user's quota: the gang is relaunched whole at once."""
    if job.substatus not in _REPLACING:
        return job
    for node in pending_nodes.pending(job.replacing):
        job = _ensure_one(deps, job, node, now)
        if job.replacing is None or job.substatus not in _REPLACING:
            return job  # given up
    return job


def _ensure_one(deps: Deps, job: JobDoc, replacing: PendingNode, now: datetime) -> JobDoc:
    name = replacing.replacement
    if deps.store.get_instance(name) is not None:
        return job
    if job.machine_id is None or job.zone is None:
        return abandon(deps, job, now, "the gang's machine and zone are not on record")
    machine, provisioning = parse_machine_id(job.machine_id)
    option = Option(machine=load_catalog()[machine], provisioning=provisioning, zone=job.zone)
    made = deps.compute.get(job.zone, name)
    if made is not None:  # inserted by a call that died before recording it
        record_replacement(deps, job, made, option, now, slot_taken=False)
        return job
    try:
        hold_instance_slots(deps, job, [name], now)
    except OverInstanceQuota as over:
        return abandon(deps, job, now, str(over))
    token = issue_event_token(deps, job, holder=name)
    request = build_vm_request(
        option, assignment_for(deps, job), deps.settings.image, job.user,
        vm_account_of(deps, job), event_token=token,
        # Its trainer restores only once the gang regroups (node 0's save complete).
        restore_gate=RESTORE_WAIT,
    )  # fmt: skip
    request = replace(
        request,
        name=name,
        request_id=request_id(job.job_id, job.attempt, _insert_key(name, replacing.refusals)),
        # The attempt's tag: its firewall rule lets the gang's nodes, the
        # replacement among them, reach each other.
        network_tag=gang_tag(job.job_id, job.attempt),
    )
    try:
        vm = deps.compute.insert(request)
    except CapacityError as err:
        free_instance_slot(deps, job.user, name, now)
        record_request(deps, option.machine_id, ok=False)
        deps.store.update_job(
            job.job_id, lambda current: node_replacement.insert_refused(current, name, now)
        )
        logs.warning(
            f"job {job.job_id}: no capacity for {name} in {job.zone} ({err.reason}); "
            f"asked again in {REINSERT_AFTER_S:.0f} s",
            job_id=job.job_id,
        )
        return job
    except Unplaceable as err:
        free_instance_slot(deps, job.user, name, now)
        return abandon(deps, job, now, err.detail)
    record_request(deps, option.machine_id, ok=True)
    record_replacement(deps, job, vm, option, now, slot_taken=True)
    logs.info(
        f"job {job.job_id}: {name} replaces {replacing.lost} in {vm.zone}",
        job_id=job.job_id,
        instance=name,
    )
    return job


def _insert_key(name: str, refusals: int) -> str:
    """The replacement's insert's key: one per try after a refusal."""
    return f"replace/{name}" + (f"/{refusals}" if refusals else "")


def record_replacement(
    deps: Deps, job: JobDoc, vm: Vm, option: Option, now: datetime, slot_taken: bool
) -> None:
    """The replacement VM on the attempt's record (its name and id, in the
    attempt's log query), then its instance document: in this order, as the
    instance document is what tells a later call that the VM is recorded."""
    deps.store.update_job(
        job.job_id, lambda current: node_replacement.placed(current, vm.name, vm.id, now)
    )
    record_instance(deps, job, vm, option, now, slot_taken=slot_taken)


def gang_stopped(
    deps: Deps,
    job_id: str,
    instance: str,
    attempt: int,
    step: int | None,
    uri: str | None,
    generation: int | None = None,
) -> None:
    """A node stopped with its gang (its save, the head's, complete): kept
    on the job, then the gang regroups if it was waiting for that."""
    job = deps.store.update_job(
        job_id,
        lambda current: node_replacement.stopped(current, instance, attempt, step, uri, generation),
    )
    if job is not None and job.replacing is not None:
        regroup_if_ready(deps, job_id, deps.clock())


def lost_node_saved(deps: Deps, job_id: str, instance: str, attempt: int) -> None:
    """The lost node's agent reported its save after the log sink's report
    recorded its loss: a lost node 0's save is complete."""
    job = deps.store.update_job(
        job_id, lambda current: node_replacement.lost_node_saved(current, instance, attempt)
    )
    if job is not None and job.replacing is not None:
        regroup_if_ready(deps, job_id, deps.clock())


def replacement_booted(deps: Deps, job_id: str, instance: str, attempt: int) -> None:
    """The replacement's agent is up: recorded, then the gang regroups if it
    can, or an elastic gang training without it is asked to stop and grow back."""
    job = deps.store.update_job(
        job_id, lambda current: node_replacement.booted(current, instance, attempt)
    )
    if job is not None and job.replacing is not None:
        grow_if_up(deps, job_id, deps.clock())
        regroup_if_ready(deps, job_id, deps.clock())


def grow_if_up(deps: Deps, job_id: str, now: datetime) -> JobDoc | None:
    """An elastic gang training at a smaller size, its replacement up: every
    node of the smaller gang is asked to stop (``spotline-gang-stop``: its
    generation), then the job written to wait for the stop's save (asked
    first: a crash between is asked again by the reaper, the same value).
    None: nothing to ask (``gang_resize.grows``)."""
    job = deps.store.get_job(job_id)
    if job is None or job.replacing is None or not gang_resize.grows(job):
        return None
    items = {GANG_STOP_METADATA_KEY: str(job.gang_generation)}
    _tell(deps, job, job.replacing.shrunk, items, "the request to stop and grow back")
    asked = deps.store.update_job(job_id, lambda current: gang_resize.grow_asked(current, now))
    logs.info(
        f"job {job_id}: {job.replacing.replacement} is up; the gang stops to grow back "
        f"to {len(job.nodes)} nodes",
        job_id=job_id,
    )
    return asked


def regroup_if_ready(deps: Deps, job_id: str, now: datetime) -> JobDoc | None:
    """Write the regroup the gang is ready for on the job (training again,
    at the generation it makes), then tell the gang's nodes its node list,
    then mark it told (``node_replacement.recorded``, ``told``). Recorded
    first: two handlers planning at once make two regroups in turn, never two
    node lists under one generation; a crash before it is marked told is told
    again by the reaper, the same value. The whole gang, its replacement's
    restore gate opened; or an elastic gang's survivors alone, the
    replacement still booting (``gang_resize``). A regroup recorded and not
    told yet is told first. None: nothing to tell."""
    job = deps.store.get_job(job_id)
    if job is None or (job.telling is None and node_replacement.plan(job, now) is None):
        return None
    job = deps.store.update_job(job_id, lambda current: node_replacement.recorded(current, now))
    telling = None if job is None else job.telling
    if job is None or telling is None:
        return None
    regroup = Regroup(
        generation=telling.generation,
        nodes=telling.nodes,
        hosts=gang_hosts(deps, telling.nodes),
        master_port=gang_port(job.job_id, job.attempt, telling.generation),
    )
    items = {REGROUP_METADATA_KEY: regroup.model_dump_json()}
    if not telling.shrink:
        # Opened unless a VM of an earlier attempt may still save (a gang
        # that lost a node as it set up, on a later attempt): then whoever
        # sees the last such VM go opens it (``restore_gate``).
        instances = deps.store.instances_of_job(job_id)
        items[RESTORE_METADATA_KEY] = gate_value(job, instances, now) or RESTORE_GO
    # Never over a newer regroup (a later one, told first on that node).
    newer = partial(_newer_regroup, telling.generation)
    _tell(deps, job, telling.nodes, items, "the gang's regroup", unless=newer)
    regrouped = deps.store.update_job(
        job_id, lambda current: node_replacement.told(current, telling.generation)
    )
    if items.get(RESTORE_METADATA_KEY, RESTORE_GO) != RESTORE_GO:
        # The earlier attempt's last VM may have gone since the read above:
        # whoever saw it go left the gate to this regroup while it was under way.
        open_restore_gate(deps, job_id, deps.clock())
    logs.info(
        f"job {job_id}: the gang regrouped (generation {regroup.generation}: "
        f"{', '.join(regroup.nodes)})",
        job_id=job_id,
    )
    return regrouped


def _tell(
    deps: Deps,
    job: JobDoc,
    nodes: list[str],
    items: dict[str, str],
    what: str,
    unless: Callable[[dict[str, str]], bool] | None = None,
) -> None:
    """Write ``items`` into each of ``nodes``' metadata (not where ``unless``
    is True of its items; ``vm_metadata``: again while refused as transient).
    A node that cannot be told (gone): its loss is the reaper's to see."""
    for name in nodes:
        try:
            write_metadata(deps, job.zone or "", name, items, unless)
        except Exception as err:
            logs.warning(f"{name}: could not tell it {what}: {err}", job_id=job.job_id)


def _newer_regroup(generation: int, items: dict[str, str]) -> bool:
    """Whether a node's metadata ``items`` hold a regroup newer than ``generation``."""
    told = items.get(REGROUP_METADATA_KEY)
    if told is None:
        return False
    try:
        return Regroup.model_validate_json(told).generation > generation
    except ValidationError:
        return False


def abandon(deps: Deps, job: JobDoc, now: datetime, why: str) -> JobDoc:
    """Give the replacement up: the gang is relaunched whole as a new
    attempt (the job written first; its nodes, the replacement included, go
    as a lost attempt's do)."""
    attempt = job.attempt
    relaunched = deps.store.update_job(
        job.job_id, lambda current: _abandoned(current, attempt, now, why)
    )
    if relaunched is None:
        return job
    if relaunched.attempt == attempt:
        if relaunched.status in JobStatus.terminal():  # max_attempts: the gang goes
            release_instances(deps, _live_nodes(deps, job.job_id, attempt, why), now)
            settle(deps, relaunched, now)
        return relaunched
    logs.warning(f"job {job.job_id}: {why}; relaunching the whole gang", job_id=job.job_id)
    return relaunch_gang(deps, relaunched, attempt, now)


def relaunch_gang(deps: Deps, job: JobDoc, attempt: int, now: datetime) -> JobDoc:
    """The job relaunched its gang after ``attempt`` gave up a replacement
    (written on the job first): every live VM of that attempt goes, the
    replacement too, and the next attempt is placed. Re-entrant."""
    note = f"attempt {attempt} relaunched its whole gang"
    return replace_attempt(
        deps, job, _live_nodes(deps, job.job_id, attempt, note), "preempted", now
    )


def _live_nodes(deps: Deps, job_id: str, attempt: int, note: str) -> list[Release]:
    """Every live VM of the job's ``attempt``, to let go with ``note``."""
    return [
        Release(node.name, note, owner=Owner.of(node))
        for node in deps.store.instances_of_job(job_id)
        if node.attempt == attempt and node.status in InstanceStatus.live()
    ]


def _abandoned(job: JobDoc, attempt: int, now: datetime, why: str) -> JobDoc:
    if job.attempt != attempt:
        return job
    return node_replacement.abandon(job, now, why)


def tend(deps: Deps, job_id: str, now: datetime) -> str | None:
    """The reaper's look at a gang replacing a node: a regroup recorded
    and not told, told; else the gang relaunched whole past its bound, else
    its replacement inserted if missing, an elastic gang asked to grow back
    once it is up, and the gang regrouped if ready. What was done, or None."""
    job = deps.store.get_job(job_id)
    if job is not None and job.telling is not None:
        # Recorded, its handler gone before every node was told: told now.
        return "regrouped" if regroup_if_ready(deps, job_id, now) is not None else None
    if job is None or job.replacing is None or job.substatus not in _REPLACING:
        return None
    if node_replacement.overdue(job, now):
        bound = job.spec.replace_node_timeout_s
        abandon(deps, job, now, f"the gang did not regroup within {bound} s")
        return "replacement_abandoned"
    since = job.replacing.since
    asked = [node.refused_at or since for node in pending_nodes.pending(job.replacing)]
    if any((now - at).total_seconds() >= REINSERT_AFTER_S for at in asked):
        ensure_replacement(deps, job, now)
    if grow_if_up(deps, job_id, now) is not None:
        return "grow_asked"
    return "regrouped" if regroup_if_ready(deps, job_id, now) is not None else None
