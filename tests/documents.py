"""Documents for the pure tests (no emulator): a job, its instance, a VM,
each at a fixed time and in a state named by the caller."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from spotline.shared.domain.documents import InstanceDoc, JobDoc, QueueEntry, UserDoc
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from spotline.shared.domain.vms import Provisioning, Vm, VmState

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(
    job_id: str = "job1",
    attempt: int = 1,
    substatus: JobSubstatus = JobSubstatus.TRAINING,
    status: JobStatus = JobStatus.TRAINING,
    spec: dict[str, Any] | None = None,
    **fields: Any,
) -> JobDoc:
    base = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}
    made = new_job(JobSpec.model_validate({**base, **(spec or {})}), job_id, "m1", T0)
    instance = f"sl-{job_id}-a{attempt}"
    placed = substatus not in (JobSubstatus.REQUESTING_SERVER, JobSubstatus.WAITING_FOR_CAPACITY)
    update = {"attempt": attempt, "status": status, "substatus": substatus, "updated_at": T0}
    return made.model_copy(update={"instance": instance if placed else None, **update, **fields})


def instance(
    name: str = "sl-job1-a1",
    job_id: str = "job1",
    attempt: int = 1,
    status: InstanceStatus = InstanceStatus.EXECUTING,
    **fields: Any,
) -> InstanceDoc:
    return InstanceDoc(
        name=name,
        job_id=job_id,
        user="alice",
        attempt=attempt,
        machine_id="g2-standard-4",
        machine_type="g2-standard-4",
        zone="local-a",
        provisioning=Provisioning.SPOT,
        status=status,
        created_at=T0,
        updated_at=T0,
        **fields,
    )


def vm(
    name: str = "sl-job1-a1",
    state: VmState = VmState.RUNNING,
    labels: dict[str, str] | None = None,
) -> Vm:
    return Vm(name=name, zone="local-a", state=state, labels={"spotline": "true", **(labels or {})})


def entry(job_id: str = "job1", reason: Any = "no-capacity", **fields: Any) -> QueueEntry:
    base: dict[str, Any] = {"attempt": 1, "not_before": T0, "enqueued_at": T0}
    return QueueEntry(job_id=job_id, reason=reason, **{**base, **fields})


def user(
    name: str = "alice",
    active_jobs: tuple[str, ...] = (),
    active_instances: tuple[str, ...] = (),
    stopped_instances: tuple[str, ...] = (),
) -> UserDoc:
    return UserDoc(
        user=name,
        active_jobs=list(active_jobs),
        active_instances=list(active_instances),
        stopped_instances=list(stopped_instances),
    )
