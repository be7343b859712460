"""The reaper's stage 4, pure: users' quota slots (``spotline.shared.domain.quotas``)
that a crash left taken, and which users' slots can be so at all.

Every path that ends a job or a VM frees its slot itself; a slot stays taken
only when the process died between the two writes. Such a slot costs its user
a place in the quota: a job of theirs waits for quota (or a cooling VM of
theirs is ended early to make room) until the reaper frees it.

Checking a user's slots costs reads: the user, then the jobs and instances
the slots name (a document a slot). ``users_in_doubt`` spares them
for users whose every slot names a job the tick listed as active, a VM it
listed as live, or (a stopped slot) a VM it listed as stopped: stage 4 would
free none of those slots. The listings are older than the users' read, so a
slot they show as held by something can have gone stale since: the next
tick's listings no longer show that thing, and its user is checked then.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from spotline.shared.domain.documents import InstanceDoc, JobDoc, UserDoc
from spotline.shared.domain.liveness import being_placed_now, vm_being_placed
from spotline.shared.domain.placement import vm_attempt
from spotline.shared.domain.reaper_actions import (
    FreeInstanceSlot,
    FreeJobSlot,
    FreeStoppedSlot,
    SlotAction,
)
from spotline.shared.domain.states import InstanceStatus, JobStatus
from spotline.shared.domain.stopping import STOPPED, STOPPING_OR_STOPPED


def users_in_doubt(
    users: Sequence[UserDoc],
    active_jobs: Collection[str],
    live: Collection[str],
    stopped: Collection[str],
) -> list[str]:
    """The users with a slot that names something the listings do not show
    holding it: a job not listed active, an active-instance slot's VM not
    listed live, a stopped slot's VM not listed stopped. Only their slots can
    be stale (``decide_slots`` frees no other)."""
    return [
        user.user
        for user in users
        if any(job_id not in active_jobs for job_id in user.active_jobs)
        or any(name not in live for name in user.active_instances)
        or any(name not in stopped for name in user.stopped_instances)
    ]


def decide_slots(
    users: Sequence[UserDoc],
    jobs: Mapping[str, JobDoc],
    instances: Mapping[str, InstanceDoc],
) -> list[SlotAction]:
    """Stage 4: free the slots of jobs that ended, of instances that closed or
    stopped, and of VMs that were never made, when a crash left them taken.

    Args:
        users: read first.
        jobs: the jobs the slots name (each user's jobs, a VM's job from its
            name), read after ``users`` and before ``instances``: a placement
            writes the instance document before it moves the job on, so a
            placement that finished in between is seen.
        instances: the instances the slots name (missing: none).
    """
    actions: list[SlotAction] = []
    for user in users:
        for job_id in user.active_jobs:
            job = jobs.get(job_id)
            if job is None or job.status in JobStatus.terminal():
                actions.append(FreeJobSlot(user.user, job_id))
        restarting = placing(user, jobs)
        for name in user.active_instances:
            job = jobs.get(job_of_vm(name))
            if instance_slot_stale(name, job, instances.get(name), restarting):
                actions.append(FreeInstanceSlot(user.user, name))
        for name in user.stopped_instances:
            if stopped_slot_stale(instances.get(name)):
                actions.append(FreeStoppedSlot(user.user, name))
    return actions


def placing(user: UserDoc, jobs: Mapping[str, JobDoc]) -> bool:
    """A job of the user's is being placed: it may be restarting one of the
    user's stopped VMs (``spotline.functions.ops.reuse.claim_stopped`` holds the VM's
    slot, then claims the instance). Such a job holds a job slot, so it is one
    of ``user.active_jobs``, read after ``user``."""
    return any(being_placed_now(jobs.get(job_id)) for job_id in user.active_jobs)


def job_of_vm(name: str) -> str:
    """The job a VM name was made for ("" for a name spotline did not make)."""
    made_for = vm_attempt(name)
    return made_for[0] if made_for else ""


def instance_slot_stale(
    name: str, job: JobDoc | None, instance: InstanceDoc | None, restarting: bool = False
) -> bool:
    """The active-instance slot of VM ``name`` is held by nothing: no placement
    is making the VM (``job``: the one its name names), no live instance is
    it, and it is not a stopped VM that a job of its user may be restarting
    (``restarting``: one is being placed; its slot is taken before the
    instance leaves CLOSED/STOPPED)."""
    if vm_being_placed(name, job):
        return False
    if instance is None:
        return True
    if restarting and (instance.status, instance.substatus) == STOPPED:
        return False
    return instance.status not in InstanceStatus.live()


def stopped_slot_stale(instance: InstanceDoc | None) -> bool:
    """The stopped-instance slot is held by nothing stopped or being stopped."""
    return instance is None or instance.substatus not in STOPPING_OR_STOPPED
