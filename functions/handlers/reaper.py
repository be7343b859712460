"""spotline-reaper-tick -> reaper: the sweep Cloud Scheduler starts every minute.

Level-triggered and idempotent (Scheduler may fire twice): it compares what
Firestore believes with what Compute Engine says exists, and converges:

1. instances Firestore thinks live: a vanished VM is a missed preemption
   (requeue); a silent one is stalled (delete, requeue); one its job no longer
   owns is released; a CLOSING one is finished closing;
2. stopped instances: deleted when their stop period is over; spotline-labelled
   VMs no live or stopped instance owns: orphans, deleted;
3. active jobs: past ``max_runtime_s`` -> CANCELED; stuck in REQUESTING_SERVER
   (the placing function died) -> placed again;
4. the queue, in ``not_before`` order: placed again, or CANCELED after
   ``wait_request_s``.

It reads only active documents: terminal jobs and closed instances cost nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from functools import partial

from functions.deps import Deps
from functions.handlers.envelope import Message, pubsub_handler
from functions.ops.jobs import cancel, place_again, release_job, retry_capacity, retry_waiting
from functions.ops.recovery import recover
from functions.ops.slots import free_instance_slot, free_stopped_slot
from functions.ops.teardown import (
    end_cooling,
    end_stopped,
    finish_closing,
    forget_stopped,
    lose_cooling,
    price_cooling,
    release_instance,
)
from shared import logs
from shared.domain.documents import InstanceDoc, JobDoc, QueueEntry, UserDoc
from shared.domain.errors import PermanentError
from shared.domain.lifecycle import accrue
from shared.domain.liveness import (
    being_placed,
    missed_preemption_note,
    serves_its_job,
    stall_note,
    vm_being_placed,
)
from shared.domain.placement import vm_attempt
from shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from shared.domain.stopping import STOPPING_OR_STOPPED, stop_expired
from shared.domain.vms import MANAGED_LABEL, Vm, VmState


@pubsub_handler
def reaper(message: Message, deps: Deps) -> None:
    counts = sweep(deps, deps.clock())
    logs.info(f"reaper: {dict(counts) or 'nothing to do'}", **counts)


def sweep(deps: Deps, now: datetime) -> Counter[str]:
    store, compute = deps.store, deps.compute
    counts: Counter[str] = Counter()
    # Instances first, then VMs: an instance document is written after its VM
    # is created, so every instance listed here has its VM in the VM listing.
    instances = store.list_instances(InstanceStatus.live())
    vms = {vm.name: vm for vm in compute.list({MANAGED_LABEL: "true"})}
    for instance in instances:
        _each(counts, partial(_check_instance, deps, instance, vms.get(instance.name), now))
    stopped = store.stopped_instances()
    for instance in stopped:
        _each(counts, partial(_check_stopped, deps, instance, vms.get(instance.name), now))
    owned = {instance.name for instance in [*instances, *stopped]}
    for vm in vms.values():
        if vm.name not in owned:
            _each(counts, partial(_check_orphan, deps, vm, now))
    for job in store.list_jobs(JobStatus.active()):
        _each(counts, partial(_check_job, deps, job, now))
    for entry in store.due_queue(now):
        _each(counts, partial(_drain, deps, entry, now))
    for user in store.list_users():
        _each(counts, partial(_check_user, deps, user, now))
    return counts


def _each(counts: Counter[str], check: Callable[[], str | None]) -> None:
    """One document at a time: a failure is logged and the sweep goes on (the
    next tick retries it)."""
    try:
        outcome = check()
    except PermanentError as err:
        logs.warning(f"reaper: {err}")
        outcome = "skipped"
    except Exception as err:
        logs.error(f"reaper: {type(err).__name__}: {err}")
        outcome = "errors"
    if outcome:
        counts[outcome] += 1


def _check_instance(deps: Deps, instance: InstanceDoc, vm: Vm | None, now: datetime) -> str | None:
    settings = deps.settings
    if instance.status == InstanceStatus.COOLING:
        return _check_cooling(deps, instance, vm, now)
    if instance.status == InstanceStatus.CLOSING:
        finish_closing(deps, instance, now)
        return "closed"
    job = deps.store.get_job(instance.job_id)
    if being_placed(job, instance.job_id, instance.attempt):
        return None  # being placed right now: its job update is on the way
    if serves_its_job(instance, job):
        if vm is None:
            recover(deps, instance, JobSubstatus.PREEMPTED, now, missed_preemption_note(instance))
            return "missed_preemptions"
        stalled = stall_note(instance, now, settings.stall_timeout_s, settings.boot_timeout_s)
        if stalled is not None:
            recover(deps, instance, JobSubstatus.STALLED, now, note=stalled)
            return "stalled"
        return None
    # Not (or no longer) the VM of a live job: release it, unless it moved on
    # since the sweep listed it (its finished job left it cooling, or a new
    # job took it): the listing is older than the job just read.
    current = deps.store.get_instance(instance.name)
    if current is None or (current.status, current.job_id) != (instance.status, instance.job_id):
        return None
    release_instance(deps, instance.name, now, note="no live job owns it")
    return "released"


def _check_cooling(deps: Deps, instance: InstanceDoc, vm: Vm | None, now: datetime) -> str:
    """Price the cooling period so far; end it when it runs out or the VM is gone."""
    priced = price_cooling(deps, instance, now)
    if priced is None:
        return "cooling"  # claimed meanwhile
    expired = priced.cooling_until is not None and now >= priced.cooling_until
    if vm is not None:
        ended = expired and end_cooling(deps, priced, now, "cooling period over")
        return "cooling_ended" if ended else "cooling"
    lose_cooling(deps, priced, now)
    return "cooling_ended"


def _check_stopped(deps: Deps, instance: InstanceDoc, vm: Vm | None, now: datetime) -> str | None:
    """Delete a stopped VM once its period is over; close it when its VM is gone."""
    if vm is None:
        forget_stopped(deps, instance, now)
        return "stopped_lost"
    if not stop_expired(instance, now):
        return None
    return "stopped_ended" if end_stopped(deps, instance, now) else None


def _check_orphan(deps: Deps, vm: Vm, now: datetime) -> str | None:
    store = deps.store
    instance = store.get_instance(vm.name)
    if instance is not None and (
        instance.status in InstanceStatus.live() or instance.substatus in STOPPING_OR_STOPPED
    ):
        # Owned after all: its document moved between the sweep's listings (a
        # stopped VM restarted for a job, a VM being stopped).
        return None
    job_id = vm.labels.get("spotline-job", "")
    job = store.get_job(job_id)
    attempt = vm.labels.get("spotline-attempt", "")
    if attempt.isdigit() and being_placed(job, job_id, int(attempt)):
        return None  # its job is being placed: the VM will be adopted
    if vm.state == VmState.STOPPING:
        return None  # already going
    deps.compute.delete(vm.zone, vm.name)
    logs.warning(f"reaper: deleted orphan VM {vm.name} in {vm.zone}", instance=vm.name)
    return "orphans_deleted"


def _check_job(deps: Deps, job: JobDoc, now: datetime) -> str | None:
    if job.substatus in JobSubstatus.on_vm():
        # The running attempt's cost so far, for a person watching the job.
        deps.store.update_job(job.job_id, lambda current: accrue(current, now))
    limit = job.spec.max_runtime_s
    if limit is not None and (now - job.created_at).total_seconds() > limit:
        cancel(deps, job.job_id, f"max_runtime_s={limit} s reached", now)
        return "over_max_runtime"
    stuck_s = (now - job.updated_at).total_seconds()
    if (
        job.substatus == JobSubstatus.REQUESTING_SERVER
        and stuck_s > deps.settings.request_timeout_s
    ):
        return place_again(deps, job, now)
    return None


def _check_user(deps: Deps, user: UserDoc, now: datetime) -> str | None:
    """Free the slots of jobs that ended, of instances that closed or stopped,
    and of VMs that were never made, when a crash left them taken."""
    store = deps.store
    freed = 0
    for job_id in user.active_jobs:
        job = store.get_job(job_id)
        if job is None or job.status in JobStatus.terminal():
            release_job(deps, user.user, job_id, now)
            freed += 1
    for name in user.active_instances:
        if not _placing(deps, name) and not _instance_live(deps, name):
            free_instance_slot(deps, user.user, name, now)
            freed += 1
    for name in user.stopped_instances:
        instance = store.get_instance(name)
        if instance is None or instance.substatus not in STOPPING_OR_STOPPED:
            free_stopped_slot(deps, user.user, name, now)
            freed += 1
    return "slots_freed" if freed else None


def _placing(deps: Deps, name: str) -> bool:
    """A placement is creating the VM ``name`` now: its slot is taken before
    the VM exists, and its instance document is written after."""
    made_for = vm_attempt(name)
    return made_for is not None and vm_being_placed(name, deps.store.get_job(made_for[0]))


def _instance_live(deps: Deps, name: str) -> bool:
    """Read after ``_placing``: a placement that finished in between wrote the
    document before it moved the job on."""
    instance = deps.store.get_instance(name)
    return instance is not None and instance.status in InstanceStatus.live()


def _drain(deps: Deps, entry: QueueEntry, now: datetime) -> str | None:
    if entry.reason == "quota":
        return retry_waiting(deps, entry, now)
    return retry_capacity(deps, entry, now)
