"""The reaper's decisions, pure: documents and the VM listing in, actions out.

The reaper (``spotline.functions.ops.sweep``) sweeps in four stages; each loads
what it needs, asks the ``decide_*`` function here, and applies the actions
one at a time (a failure is logged and the sweep goes on). Each stage loads
after the previous one applied its actions, because those change what the
next one sees (a recovered job is placed again; a canceled job frees its
slot), in the manner of dstack's background tasks, one per kind of resource:

1. ``decide_vms``: live and stopped instances against the VM listing;
2. ``decide_jobs``: active jobs (cost so far, max runtime, a dead placement,
   a gang node's exit held past the notice);
3. ``decide_queue``: due queue entries (retry, give up, drop);
4. ``decide_slots``: users' slots that a crash left taken (in
   ``spotline.shared.domain.slot_checks``, read here as ``reaping.decide_slots``).

The actions are ``spotline.shared.domain.reaper_actions``' (read here as
``reaping.Recover``, ...). The listing is older than the moment an action
runs, so some actions carry a race guard that the apply step runs on fresh
reads with the same predicate used here: ``Release`` (the instance moved on),
``DeleteOrphan`` (owned after all, or saving its state in a preemption
notice), ``FreeInstanceSlot`` and ``FreeStoppedSlot`` (a placement or a stop
finished meanwhile). The others are guarded by their own write (a cooling VM
claimed meanwhile is not ended; a stopped VM restarted meanwhile wins).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from spotline.shared.domain import gang_finish, pending_nodes, slot_checks
from spotline.shared.domain.documents import InstanceDoc, JobDoc, QueueEntry
from spotline.shared.domain.liveness import (
    being_placed,
    finishing,
    in_preemption_notice,
    missed_preemption_note,
    serves_its_job,
    stall_note,
)
from spotline.shared.domain.queueing import give_up_reason
from spotline.shared.domain.reaper_actions import (
    Accrue,
    Cancel,
    DeleteOrphan,
    DropEntry,
    EndCooling,
    EndStopped,
    FinishClosing,
    ForgetStopped,
    GiveUp,
    JobAction,
    JudgeFinish,
    LoseCooling,
    PlaceAgain,
    PriceCooling,
    QueueAction,
    Recover,
    Release,
    RetryPlacement,
    RetryQuota,
    TendReplacement,
    VmAction,
)
from spotline.shared.domain.reaper_actions import Action as Action  # callers read reaping.Action
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus, JobSubstatus
from spotline.shared.domain.stopping import STOPPING_OR_STOPPED, stop_expired
from spotline.shared.domain.vms import Vm, VmState

JOB_LABEL = (
    "spotline-job"  # on every VM spotline makes (spotline.shared.domain.placement.vm_labels)
)
ATTEMPT_LABEL = "spotline-attempt"

# Stage 4 lives in ``spotline.shared.domain.slot_checks``; callers read it here.
FreeJobSlot = slot_checks.FreeJobSlot
FreeInstanceSlot = slot_checks.FreeInstanceSlot
FreeStoppedSlot = slot_checks.FreeStoppedSlot
decide_slots = slot_checks.decide_slots
users_in_doubt = slot_checks.users_in_doubt
job_of_vm = slot_checks.job_of_vm
instance_slot_stale = slot_checks.instance_slot_stale
stopped_slot_stale = slot_checks.stopped_slot_stale


class Timeouts(Protocol):
    """The reaper's limits (``spotline.shared.settings.Settings`` has them)."""

    @property
    def stall_timeout_s(self) -> float: ...
    @property
    def boot_timeout_s(self) -> float: ...
    @property
    def request_timeout_s(self) -> float: ...
    @property
    def cost_refresh_s(self) -> float: ...


def decide_vms(
    instances: Sequence[InstanceDoc],
    stopped: Sequence[InstanceDoc],
    vms: Sequence[Vm],
    jobs: Mapping[str, JobDoc],
    timeouts: Timeouts,
    now: datetime,
) -> list[VmAction]:
    """Stage 1.

    Args:
        instances: the live instances (listed before ``vms``: an instance
            document is written after its VM is created, so each has its VM
            in the listing unless the VM is gone).
        stopped: the stopped instances, listed before ``vms`` too.
        vms: spotline's VMs as Compute Engine lists them.
        jobs: the jobs of those instances and of the VMs' labels, read after
            the listings; a job missing here does not exist.
    """
    by_name = {vm.name: vm for vm in vms}
    actions: list[VmAction] = []
    for instance in instances:
        action = _instance_action(instance, by_name.get(instance.name), jobs, timeouts, now)
        if action is not None:
            actions.append(action)
    for instance in stopped:
        if instance.name not in by_name:
            actions.append(ForgetStopped(instance))
        elif stop_expired(instance, now):
            actions.append(EndStopped(instance))
    owned = {instance.name for instance in [*instances, *stopped]}
    for vm in vms:
        job = jobs.get(vm.labels.get(JOB_LABEL, ""))
        if vm.name not in owned and orphaned(vm, None, job, now):
            actions.append(DeleteOrphan(vm))
    return actions


def _instance_action(
    instance: InstanceDoc,
    vm: Vm | None,
    jobs: Mapping[str, JobDoc],
    timeouts: Timeouts,
    now: datetime,
) -> VmAction | None:
    if instance.status == InstanceStatus.COOLING:
        if vm is None:
            return LoseCooling(instance)
        expired = instance.cooling_until is not None and now >= instance.cooling_until
        return EndCooling(instance) if expired else PriceCooling(instance)
    if instance.status == InstanceStatus.CLOSING:
        return FinishClosing(instance) if closing_abandoned(instance, timeouts, now) else None
    job = jobs.get(instance.job_id)
    if being_placed(job, instance.job_id, instance.attempt):
        return None  # its job update is on the way
    if serves_its_job(instance, job):
        if vm is None:
            return Recover(instance, JobSubstatus.PREEMPTED, missed_preemption_note(instance))
        if _finish_held(job, instance.attempt):
            return None  # its silence is the finish, judged at the window's end (stage 2)
        stalled = stall_note(instance, now, timeouts.stall_timeout_s, timeouts.boot_timeout_s)
        return None if stalled is None else Recover(instance, JobSubstatus.STALLED, stalled)
    if finishing(instance, job, now, timeouts.request_timeout_s):
        return None  # its job's end is letting it go: cooling, stopped or deleted
    if vm is not None and in_preemption_notice(instance.name, instance, job, now):
        return None  # its job moved on, and the VM saves its state till the notice ends
    return Release(instance)


def closing_abandoned(instance: InstanceDoc, timeouts: Timeouts, now: datetime) -> bool:
    """Whether the reaper should finish closing ``instance``. A delete, at once:
    a late delete of a VM name no other attempt uses harms no one. A stop only
    once the function that began it must have died (``request_timeout_s``
    after it wrote CLOSING, as for a placement): two stoppers would race, and
    the slower one's stop could land after the VM was restarted for the next
    job, stopping that job's VM."""
    if instance.substatus != InstanceSubstatus.STOPPING:
        return True
    return (now - instance.updated_at).total_seconds() >= timeouts.request_timeout_s


def moved_on(listed: InstanceDoc, current: InstanceDoc | None) -> bool:
    """``Release``'s guard: the instance changed since it was listed (its
    finished job left it cooling, or a new job or attempt took it): keep it."""
    if current is None:
        return True
    return (current.status, current.job_id, current.attempt) != (
        listed.status,
        listed.job_id,
        listed.attempt,
    )


def orphaned(vm: Vm, instance: InstanceDoc | None, job: JobDoc | None, now: datetime) -> bool:
    """A VM no instance owns and no placement is making, not already going,
    and not saving its state in a preemption notice.

    Args:
        instance: the VM's instance document, if any (live or being stopped: owned).
        job: the job its labels name, if any (placing this attempt: the VM
            will be adopted).
    """
    if instance is not None and (
        instance.status in InstanceStatus.live() or instance.substatus in STOPPING_OR_STOPPED
    ):
        return False
    if (
        job is not None
        and job.status in JobStatus.active()
        and vm.name in pending_nodes.replacements(job)
    ):
        # A gang's replacement node, its instance written next; once its job
        # ended (the loss that ended it kept the replacement on record),
        # nothing will write it.
        return False
    attempt = vm.labels.get(ATTEMPT_LABEL, "")
    if attempt.isdigit() and being_placed(job, vm.labels.get(JOB_LABEL, ""), int(attempt)):
        return False
    if in_preemption_notice(vm.name, instance, job, now):
        return False
    return vm.state not in VmState.going()


def _finish_held(job: JobDoc | None, attempt: int) -> bool:
    """Whether ``job`` holds a node's finish of ``attempt`` (``gang_finish``)."""
    held = job.held_finish if job is not None else None
    return held is not None and held.event.attempt == attempt


def _cost_stale(job: JobDoc, timeouts: Timeouts, now: datetime) -> bool:
    priced = job.cost_as_of
    return priced is None or (now - priced).total_seconds() >= timeouts.cost_refresh_s


def decide_jobs(jobs: Sequence[JobDoc], timeouts: Timeouts, now: datetime) -> list[JobAction]:
    """Stage 2, over the active jobs."""
    actions: list[JobAction] = []
    for job in jobs:
        if job.substatus in JobSubstatus.on_vm() and _cost_stale(job, timeouts, now):
            actions.append(Accrue(job))
        limit = job.spec.max_runtime_s
        if limit is not None and (now - job.created_at).total_seconds() > limit:
            actions.append(Cancel(job, f"max_runtime_s={limit} s reached"))
            continue
        if gang_finish.due(job, now):
            # Stage 1 ran first: a node of its attempt gone from the listing was
            # recovered as a preemption there, which dropped the hold.
            actions.append(JudgeFinish(job))
        if job.replacing is not None or job.telling is not None:
            actions.append(TendReplacement(job))
        stuck_s = (now - job.updated_at).total_seconds()
        if job.substatus == JobSubstatus.REQUESTING_SERVER and stuck_s > timeouts.request_timeout_s:
            actions.append(PlaceAgain(job))
    return actions


def decide_queue(
    entries: Sequence[QueueEntry], jobs: Mapping[str, JobDoc], now: datetime
) -> list[QueueAction]:
    """Stage 3, over the due entries; ``jobs``: their jobs (missing: gone)."""
    actions: list[QueueAction] = []
    for entry in entries:
        if entry.reason == "quota":
            actions.append(RetryQuota(entry))
            continue
        job = jobs.get(entry.job_id)
        if job is None or job.status in JobStatus.terminal() or job.attempt != entry.attempt:
            actions.append(DropEntry(entry))
        elif job.substatus not in (
            JobSubstatus.REQUESTING_SERVER,
            JobSubstatus.WAITING_FOR_CAPACITY,
        ):
            actions.append(DropEntry(entry))  # placed meanwhile
        elif (reason := give_up_reason(entry, job.spec, now)) is not None:
            actions.append(GiveUp(job, entry, reason))
        else:
            actions.append(RetryPlacement(job, entry))
    return actions
