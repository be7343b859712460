"""VMs made for a job that none of its attempts recorded: charged when deleted.

A cancel (or any end of the job) can come between a placement's insert and
its write of the new VM on the job (``lifecycle.vm_recorded``, which leaves an
ended job as it is). The job then ends with no attempt record of that VM, and
``lifecycle.accrue``, which prices the records, never sees the minutes the VM
ran. Whoever deletes such a VM (the placement itself, finding the job ended;
the reaper, releasing its instance or deleting it as an orphan) charges it
here first: from Compute Engine's creationTimestamp to the delete, as a record
in ``JobDoc.unrecorded_vms``. The record is keyed by VM name, so a second
delete, a redelivery or a late sweep finds it charged and changes nothing.

Pure: the callers (``spotline.functions.ops.teardown``) read and write.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from spotline.shared.domain.catalog import Machine
from spotline.shared.domain.documents import AttemptRecord, InstanceDoc, JobDoc
from spotline.shared.domain.lifecycle import accrue
from spotline.shared.domain.placement import option_of, vm_attempt
from spotline.shared.domain.states import JobStatus
from spotline.shared.domain.vms import Vm

JOB_LABEL = "spotline-job"  # spotline.shared.domain.placement.vm_labels
ATTEMPT_LABEL = "spotline-attempt"


@dataclass(frozen=True)
class MadeVm:
    """A VM a placement made for one attempt of one job, with what it costs."""

    job_id: str
    attempt: int
    name: str
    zone: str
    machine_id: str
    created_at: datetime
    price_per_hour: float
    on_demand_price_per_hour: float


def made_from_listing(vm: Vm, catalog: dict[str, Machine]) -> MadeVm | None:
    """The VM as Compute Engine lists it, read through its labels. None: not a
    VM spotline named for the job and attempt its labels carry, or one whose
    creation time or machine is unknown (nothing can be priced)."""
    job_id, attempt = vm.labels.get(JOB_LABEL, ""), vm.labels.get(ATTEMPT_LABEL, "")
    option = option_of(vm.labels, vm.zone, catalog)
    if not attempt.isdigit() or option is None or vm.created_at is None:
        return None
    if vm_attempt(vm.name) != (job_id, int(attempt)):
        return None
    return MadeVm(
        job_id=job_id,
        attempt=int(attempt),
        name=vm.name,
        zone=vm.zone,
        machine_id=option.machine_id,
        created_at=vm.created_at,
        price_per_hour=option.price_per_hour,
        on_demand_price_per_hour=option.machine.on_demand_usd_per_hour,
    )


def made_from_instance(instance: InstanceDoc) -> MadeVm | None:
    """The VM of an instance document the placement wrote. None: a VM made for
    another job or attempt (a cooling or stopped VM reused): its minutes since
    the reuse began are not a made-and-unrecorded VM's."""
    if vm_attempt(instance.name) != (instance.job_id, instance.attempt):
        return None
    return MadeVm(
        job_id=instance.job_id,
        attempt=instance.attempt,
        name=instance.name,
        zone=instance.zone,
        machine_id=instance.machine_id,
        # Written after the insert answered: a little late where Compute's own
        # time was not read back.
        created_at=instance.vm_created_at or instance.created_at,
        price_per_hour=instance.base_price_per_hour,
        on_demand_price_per_hour=instance.on_demand_price_per_hour,
    )


def names_vm(job: JobDoc, name: str) -> bool:
    """Whether the job already counts the VM ``name``: one of its attempts ran
    on it (node or leader), or it was charged here before."""
    return any(
        record.instance == name or name in record.node_names
        for record in [*job.attempts, *job.unrecorded_vms]
    )


def charge_unrecorded(job: JobDoc, vm: MadeVm, deleted_at: datetime) -> JobDoc:
    """Charge ``job`` the VM's time from its creation to ``deleted_at``, once.

    Unchanged when the job counts the VM already, or when the VM's attempt is
    still the job's live one: that placement records it (and its record is
    priced), so a charge here would count it twice.
    """
    if names_vm(job, vm.name):
        return job
    if job.status in JobStatus.active() and vm.attempt >= job.attempt:
        return job
    ended = job.status.lower() if job.status in JobStatus.terminal() else "replaced"
    record = AttemptRecord(
        attempt=vm.attempt,
        instance=vm.name,
        zone=vm.zone,
        machine_id=vm.machine_id,
        started_at=vm.created_at,
        # Clocks apart (Compute's and the function's) never make a negative charge.
        ended_at=max(deleted_at, vm.created_at),
        outcome=ended,
        price_per_hour=vm.price_per_hour,
        on_demand_price_per_hour=vm.on_demand_price_per_hour,
    )
    charged = job.model_copy(update={"unrecorded_vms": [*job.unrecorded_vms, record]})
    return accrue(charged, deleted_at)
