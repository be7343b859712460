"""Letting a VM go: delete it (release), stop it for a later job, end its
cooling or stopped period, and charge the cooling period to the job that left
the VM cooling (see ``spotline.shared.domain.stopping`` and ``spotline.shared.domain.cooling``).

Every step writes Firestore before it calls Compute Engine, so a crash in
between leaves a document the reaper finishes: CLOSING/TERMINATING is deleted
again, CLOSING/STOPPING is stopped again. Every step is re-entrant.

A step taken for a job (its end, its cancel) lets go of the VM only while the
instance is still that job's attempt's (``spotline.shared.domain.liveness.if_owned``,
checked inside the guarded write): a late or redelivered event of a job whose
VM the user's next job has claimed or restarted since leaves it to that job.

Every delete of a VM made for a job charges the job first for a VM none of
its attempts recorded (``spotline.shared.domain.unrecorded_vms``): it ended while the
VM was being placed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from spotline.functions.deps import Deps
from spotline.functions.ops.gang_rules import end_rule
from spotline.functions.ops.slots import (
    free_instance_slot,
    free_slot_of_stopping,
    free_stopped_slot,
    take_stop_slot,
)
from spotline.shared import logs
from spotline.shared.domain import lifecycle, pending_nodes
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.cooling import charge, close_segment, start_cooling, while_cooling
from spotline.shared.domain.documents import InstanceDoc, JobDoc
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.liveness import Owner, belongs_to, if_owned
from spotline.shared.domain.placement import vm_name
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus
from spotline.shared.domain.stopping import (
    STOPPING_OR_STOPPED,
    stop_ended,
    stop_expired,
    stopped,
    stopping,
)
from spotline.shared.domain.unrecorded_vms import (
    MadeVm,
    charge_unrecorded,
    made_from_instance,
    made_from_listing,
)
from spotline.shared.domain.vms import Vm

# -- deleting --


def release_instance(
    deps: Deps,
    name: str,
    now: datetime,
    note: str,
    substatus: InstanceSubstatus = InstanceSubstatus.TERMINATED,
    *,
    owner: Owner | None = None,
) -> InstanceDoc:
    """Close the instance: CLOSING/TERMINATING, delete the VM, then CLOSED.

    The Firestore write comes before the delete, so a crash in between leaves
    an instance the reaper sees CLOSING and finishes closing. Re-entrant.

    Args:
        owner: the job attempt it is closed for; when another holds the
            instance now, nothing is written or deleted. None: whoever holds it.
    """
    return release_instances(deps, [Release(name, note, substatus, owner)], now)[0]


@dataclass(frozen=True)
class Release:
    """One instance to close (``release_instance``'s arguments)."""

    name: str
    note: str
    substatus: InstanceSubstatus = InstanceSubstatus.TERMINATED
    owner: Owner | None = None


def release_instances(deps: Deps, releases: Sequence[Release], now: datetime) -> list[InstanceDoc]:
    """``release_instance`` for several VMs at once (a gang's nodes): every
    one CLOSING first, then their VMs deleted together (``delete_many``: one
    wait for all, not one after another), then each CLOSED and its slot
    freed. The instances, in ``releases`` order."""
    releasing = begin_release(deps, releases, now)
    delete_released(deps, releasing)
    return end_release(deps, releasing, now)


@dataclass(frozen=True)
class Releasing:
    """Instances written CLOSING (``begin_release``), their VMs not yet deleted."""

    closing: list[tuple[Release, InstanceDoc]]
    doomed: list[tuple[Release, InstanceDoc]]  # those whose VMs are to be deleted


def begin_release(deps: Deps, releases: Sequence[Release], now: datetime) -> Releasing:
    """Every instance CLOSING (a crash from here on leaves the reaper to
    finish the deletes), and each VM no attempt recorded charged to its job.
    ``delete_released`` and ``end_release`` finish, the caller free to do
    something between (insert the next attempt's VMs: it never waits for
    these deletes)."""
    store = deps.store
    closing: list[tuple[Release, InstanceDoc]] = []
    for release in releases:
        instance = store.update_instance(
            release.name, _for(release.owner, _closing(release.note, now))
        )
        if instance is None:
            raise PermanentError(f"no instance document for {release.name}")
        closing.append((release, instance))
    # Not another attempt's since, and not being stopped by its job (which the
    # caller could not see, e.g. the reaper working from an earlier listing):
    # a stopped VM is kept, not deleted.
    doomed = [
        (release, instance)
        for release, instance in closing
        if (release.owner is None or _still_held(instance, release.owner))
        and instance.substatus not in STOPPING_OR_STOPPED
    ]
    for _, instance in doomed:
        made = made_from_instance(instance)
        if made is not None:  # a VM no attempt recorded: charged before it goes
            charge_unrecorded_vm(deps, made)
    return Releasing(closing, doomed)


def delete_released(deps: Deps, releasing: Releasing) -> None:
    """Delete the VMs ``begin_release`` doomed, together; then the firewall
    rule of each gang attempt they were nodes of, if that attempt is over
    (``spotline.shared.domain.gang_network``)."""
    if not releasing.doomed:
        return
    deps.compute.delete_many([(instance.zone, instance.name) for _, instance in releasing.doomed])
    for job_id, attempt in sorted(
        {
            (i.job_id, i.attempt)
            for _, i in releasing.doomed
            if i.name != vm_name(i.job_id, i.attempt)
        }
    ):
        end_rule(deps, job_id, attempt)


def end_release(deps: Deps, releasing: Releasing, now: datetime) -> list[InstanceDoc]:
    """Their VMs deleted: each instance CLOSED and its slot freed. The
    instances, in the order they were released."""
    store = deps.store
    released = {release.name: instance for release, instance in releasing.closing}
    for release, instance in releasing.doomed:
        closed = store.update_instance(
            release.name, _for(release.owner, _closed(release.note, release.substatus, now))
        )
        free_instance_slot(deps, instance.user, instance.name, now)
        released[release.name] = closed or instance
    return [released[release.name] for release, _ in releasing.closing]


def _closing(note: str, now: datetime) -> Callable[[InstanceDoc], InstanceDoc]:
    return lambda current: lifecycle.instance_closing(current, now, note)


def _closed(
    note: str, substatus: InstanceSubstatus, now: datetime
) -> Callable[[InstanceDoc], InstanceDoc]:
    return lambda current: lifecycle.instance_closed(current, now, note, substatus)


def delete_orphan(deps: Deps, vm: Vm) -> None:
    """Delete a VM no instance document owns (the reaper found it): its job
    is charged first when no attempt recorded it (the job ended while the
    placement that made it had not written it yet, or had died)."""
    made = made_from_listing(vm, load_catalog())
    if made is not None:
        charge_unrecorded_vm(deps, made)
    deps.compute.delete(vm.zone, vm.name)


def charge_unrecorded_vm(deps: Deps, made: MadeVm) -> None:
    """Charge the VM's job for it up to now, unless the job counts it already.

    Before the delete, Firestore first: a crash in between leaves the VM for
    the next delete, which finds it charged. The end is the clock's now, not
    the caller's: a placement's ``now`` is from before the VM it made.
    """
    deleted_at = deps.clock()
    deps.store.update_job(made.job_id, lambda job: charge_unrecorded(job, made, deleted_at))


def finish_closing(deps: Deps, instance: InstanceDoc, now: datetime) -> None:
    """A function died while it closed the instance: stop or delete it, as it meant to."""
    job = deps.store.get_job(instance.job_id)
    if instance.substatus == InstanceSubstatus.STOPPING and job is not None:
        stop_instance(deps, instance, job.spec.stop_period_s, now, "stopped by the reaper")
    else:
        release_instance(deps, instance.name, now, note="closed by the reaper")


# -- stopping --


def after_job(deps: Deps, job: JobDoc, name: str, now: datetime) -> None:
    """The job ended on the VM ``name``: keep it cooling for the user's next
    job (``cool_down_period_s``, one node; the reaper ends it when the period
    ends), else stop or delete it. Only while the job's current attempt holds
    it: a redelivered end, come after the next job claimed or restarted the
    VM, leaves it to that job."""
    owner = Owner.of(job)
    period = job.spec.cool_down_period_s
    if period > 0 and not job.nodes:
        rule = deps.settings.cooling_rule
        cooling = deps.store.update_instance(
            name, if_owned(owner, lambda current: start_cooling(current, now, period, rule))
        )
        if cooling is not None:
            _still_held(cooling, owner)  # logs it when the VM was another job's
    else:
        retire_instance(deps, owner, name, now, note=f"job {job.status.lower()}")
    if job.status in JobStatus.terminal():
        # The gang ended (an elastic one at its smaller size, most often)
        # before a lost node's replacement joined: that VM runs nothing.
        note = f"job {job.status.lower()} before it joined the gang"
        for replacement in pending_nodes.replacements(job):
            retire_instance(deps, owner, replacement, now, note=note)
    if job.nodes:  # a node kept stopped for a later job must not reach its old peers
        end_rule(deps, job.job_id, job.attempt)


def retire_instance(deps: Deps, owner: Owner, name: str, now: datetime, note: str) -> None:
    """``owner`` is done with the VM: stop it (``try_stop``) or delete it.
    Another job holds it now: left to that one."""
    instance = deps.store.get_instance(name)
    if instance is not None and not _still_held(instance, owner):
        return
    if instance is None or not try_stop(deps, instance, now, note):
        release_instance(deps, name, now, note, owner=owner)


def try_stop(deps: Deps, instance: InstanceDoc, now: datetime, note: str) -> bool:
    """Stop the VM when ``take_stop_slot`` allows it. False: delete it instead."""
    period_s = take_stop_slot(deps, instance, now)
    if period_s is None:
        return False
    stop_instance(deps, instance, period_s, now, note)
    return True


def stop_instance(
    deps: Deps, instance: InstanceDoc, period_s: int, now: datetime, note: str
) -> None:
    """CLOSING/STOPPING, stop the VM, then CLOSED/STOPPED. Re-entrant.

    When the instance is being deleted already (the reaper released it while
    its job was finishing), the deletion goes on and nothing is stopped. Every
    write is for the job attempt that held ``instance`` when it was read: when
    another holds it now (a claim, a restart), nothing is written or stopped.
    """
    store, rule, owner = deps.store, deps.settings.cooling_rule, Owner.of(instance)
    closing = store.update_instance(
        instance.name, if_owned(owner, lambda current: stopping(current, now, note))
    )
    if closing is None or closing.substatus not in STOPPING_OR_STOPPED:
        # The stopped slot is per VM name: free unless the VM is being stopped
        # or is stopped (by whichever job holds it now).
        free_stopped_slot(deps, instance.user, instance.name, now)
        return
    if not _still_held(closing, owner):
        return
    if not deps.compute.stop(instance.zone, instance.name):
        _forget(deps, instance, now, "the VM was gone when it was to be stopped")
        return
    # A stopped VM counts against the stopped-instances quota, not the active
    # one. Freed while the instance is still STOPPING: once it is STOPPED a job
    # of the user may restart it and take that slot, which a free after the
    # write would take from the running VM.
    free_slot_of_stopping(deps, instance.user, instance.name, now)
    store.update_instance(
        instance.name, if_owned(owner, lambda current: stopped(current, now, period_s, rule))
    )
    logs.info(f"{instance.name}: stopped, kept {period_s} s", instance=instance.name)


def _for(
    owner: Owner | None, change: Callable[[InstanceDoc], InstanceDoc]
) -> Callable[[InstanceDoc], InstanceDoc]:
    return change if owner is None else if_owned(owner, change)


def _still_held(instance: InstanceDoc, owner: Owner) -> bool:
    """The instance is still ``owner``'s; logged when another job holds it now."""
    if belongs_to(instance, owner):
        return True
    logs.info(
        f"{instance.name}: left to job {instance.job_id} (attempt {instance.attempt}), which "
        f"holds it now, not job {owner.job_id} (attempt {owner.attempt})",
        instance=instance.name,
        job_id=owner.job_id,
    )
    return False


def end_stopped(deps: Deps, instance: InstanceDoc, now: datetime) -> bool:
    """Delete a stopped VM whose period is over. The document is closed first,
    with a guarded write, so a job restarting it at that moment keeps it: one of
    the two wins. False: restarted (and maybe stopped again) meanwhile."""
    ended = deps.store.update_instance(
        instance.name,
        lambda current: (
            stop_ended(current, now, "stop period over") if stop_expired(current, now) else current
        ),
    )
    if ended is None or ended.substatus != InstanceSubstatus.TERMINATED:
        return False
    deps.compute.delete(instance.zone, instance.name)
    free_stopped_slot(deps, instance.user, instance.name, now)
    return True


def forget_stopped(deps: Deps, instance: InstanceDoc, now: datetime) -> None:
    """The stopped VM is gone: close its document, free its slots."""
    _forget(deps, instance, now, "the stopped VM is gone")


def _forget(deps: Deps, instance: InstanceDoc, now: datetime, note: str) -> None:
    """CLOSED/TERMINATED, and the user's stopped slot free."""
    deps.store.update_instance(instance.name, lambda current: _terminated(current, now, note))
    free_instance_slot(deps, instance.user, instance.name, now)
    free_stopped_slot(deps, instance.user, instance.name, now)


def _terminated(instance: InstanceDoc, now: datetime, note: str) -> InstanceDoc:
    if instance.status == InstanceStatus.CLOSED:
        return stop_ended(instance, now, note)
    return lifecycle.instance_closed(instance, now, note)  # it never got to STOPPED


# -- ending cooling --


def price_cooling(deps: Deps, instance: InstanceDoc, now: datetime) -> InstanceDoc | None:
    """The cooling period priced so far, written for a person watching. None:
    no longer cooling (a job claimed the VM meanwhile)."""
    rule = deps.settings.cooling_rule

    def priced_to_now(current: InstanceDoc) -> InstanceDoc:
        priced = while_cooling(current, now, rule)
        # Another writer may have priced it past ``now`` (a newer tick's page
        # on a faster clock, ``sweep``'s tick time): the cost of a cooling
        # period only grows.
        return current if priced.cooling_cost_usd < current.cooling_cost_usd else priced

    priced = deps.store.update_instance(instance.name, priced_to_now)
    return priced if priced is not None and priced.status == InstanceStatus.COOLING else None


def end_cooling(deps: Deps, instance: InstanceDoc, now: datetime, note: str) -> bool:
    """End a cooling period before a job claims the VM: charge it to the job
    that left the VM cooling, close the instance, then stop or delete the VM.

    The instance is closed with a guarded write that only moves a COOLING one,
    so a job claiming the VM at that moment wins or loses whole. False: a job
    claimed it first, and it runs on.
    """
    rule = deps.settings.cooling_rule
    charge_cooling(deps, while_cooling(instance, now, rule), now)
    period_s = take_stop_slot(deps, instance, now)  # None: delete it

    def close(current: InstanceDoc) -> InstanceDoc:
        if current.status != InstanceStatus.COOLING:
            return current
        priced = close_segment(current, now, rule)  # at the cooling price, escalated
        if period_s is None:
            return lifecycle.instance_closing(priced, now, note)
        return stopping(priced, now, note)

    closing = deps.store.update_instance(instance.name, close)
    if closing is None or closing.status != InstanceStatus.CLOSING:
        if period_s is not None:
            free_stopped_slot(deps, instance.user, instance.name, now)
        return False
    if period_s is not None and closing.substatus == InstanceSubstatus.STOPPING:
        stop_instance(deps, closing, period_s, now, note)
    else:
        release_instance(deps, instance.name, now, note)
    return True


def lose_cooling(deps: Deps, priced: InstanceDoc, now: datetime) -> None:
    """The cooling VM is gone (preempted): charge its period, close it."""
    rule = deps.settings.cooling_rule
    charge_cooling(deps, priced, now)
    note, gone = "lost while cooling", InstanceSubstatus.PREEMPTED
    deps.store.update_instance(
        priced.name, lambda current: lifecycle.instance_closed(current, now, note, gone, rule)
    )
    free_instance_slot(deps, priced.user, priced.name, now)


def charge_cooling(deps: Deps, instance: InstanceDoc, now: datetime) -> None:
    """Charge a cooling instance's period so far to the job that left it cooling
    (before the instance closes: a crash in between leaves it cooling, and the
    next sweep charges again, idempotently)."""
    _charge(deps, instance.job_id, instance.name, instance.cooling_cost_usd, now)


def charge_claimed(deps: Deps, instance: InstanceDoc, now: datetime) -> None:
    """A claim closed the period: charge it to the job the VM cooled for."""
    if instance.cooled_for_job:
        _charge(deps, instance.cooled_for_job, instance.name, instance.cooling_cost_usd, now)


def _charge(deps: Deps, job_id: str, instance_name: str, cost_usd: float, now: datetime) -> None:
    if cost_usd <= 0:
        return
    deps.store.update_job(
        job_id, lambda job: lifecycle.accrue(charge(job, instance_name, cost_usd), now)
    )
