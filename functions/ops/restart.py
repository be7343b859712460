"""Restarting a stopped VM for a later job of its user (see ``shared.domain.stopping``).

The restart claims the instance document first (a guarded write, one winner),
then hands the VM the job and starts it; a redelivered placement finds the
claimed instance and boots it again, idempotently.
"""

from __future__ import annotations

from datetime import datetime

from functions.deps import Deps
from functions.ops.assignments import assignment_for
from functions.ops.instance_slots import take_instance_slots
from functions.ops.release import free_instance_slot, release_instance
from functions.ops.stopped import free_stopped_slot
from shared import logs
from shared.domain.catalog import load_catalog
from shared.domain.documents import InstanceDoc, JobDoc
from shared.domain.errors import CapacityError, PermanentError
from shared.domain.placement import Option, held_vm, vm_name
from shared.domain.states import InstanceStatus
from shared.domain.stopping import restartable, restarted
from shared.domain.vms import JOB_METADATA_KEY, Vm


def claim_stopped(
    deps: Deps, job: JobDoc, machine_ids: list[str], now: datetime
) -> tuple[Vm, Option] | None:
    """Restart a stopped VM of the job's user for one of its machine ids, in
    the job's order, with the job in its metadata. None: none to restart."""
    store = deps.store
    for instance in store.instances_of_job(job.job_id):
        if _restarted_for(instance, job):
            return _boot(deps, job, instance, now)  # a redelivery: boot it again, idempotently
    zones = set(job.spec.zones or deps.settings.zones)
    candidates = [i for i in store.stopped_instances() if i.zone in zones]
    for machine_id in machine_ids:
        for instance in candidates:
            if not restartable(instance, job.user, machine_id, now):
                continue
            take_instance_slots(deps, job, [instance.name], now)  # running again, it is active
            won = store.update_instance(
                instance.name, lambda current: restarted(current, job.job_id, job.attempt, now)
            )
            if won is None or not _restarted_for(won, job):
                free_instance_slot(deps, job.user, instance.name, now)
                continue  # another job took it first
            free_stopped_slot(deps, won.user, won.name, now)
            found = _boot(deps, job, won, now)
            if found is not None:
                return found
    return None


def _restarted_for(instance: InstanceDoc, job: JobDoc) -> bool:
    """A VM restarted for this attempt (a new VM would carry the attempt's name)."""
    return (
        instance.job_id == job.job_id
        and instance.attempt == job.attempt
        and instance.status == InstanceStatus.LAUNCHING
        and instance.name != vm_name(job.job_id, job.attempt)
    )


def _boot(
    deps: Deps, job: JobDoc, instance: InstanceDoc, now: datetime
) -> tuple[Vm, Option] | None:
    """Hand the VM the job, then start it. None: it cannot start (no capacity
    in its zone now, or it is gone), and it is deleted."""
    compute = deps.compute
    try:
        assignment = assignment_for(deps, job).model_dump_json()
        compute.set_metadata(instance.zone, instance.name, {JOB_METADATA_KEY: assignment})
        compute.start(instance.zone, instance.name)
    except (CapacityError, PermanentError) as err:
        logs.warning(f"{instance.name}: cannot restart ({err}); deleting it")
        release_instance(deps, instance.name, now, f"cannot restart: {err}")
        return None
    logs.info(f"job {job.job_id}: restarted stopped instance {instance.name}", job_id=job.job_id)
    return held_vm(instance, load_catalog())
