"""The API's records: plain frozen dataclasses of what a job is now and of
what the catalog offers, made from the documents spotline keeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotline.shared.domain.documents import JobDoc


@dataclass(frozen=True)
class JobState:
    """A job as its document says now (``Job.status()``, ``spotline.jobs()``).

    ``status`` is QUEUING, TRAINING, RECOVERING, COMPLETED, FAILED or CANCELED;
    ``substatus`` the step within it (the state machine in docs/internals/how-it-works.md).
    """

    job_id: str
    user: str
    description: str
    status: str
    substatus: str
    progress: str  # "3/10": epochs done of the epochs asked
    epoch: int
    epochs: int
    attempt: int
    preemptions: int
    error: str | None
    metrics: dict[str, float | None] = field(default_factory=dict)
    machine_id: str | None = None
    cost_usd: float = 0.0
    savings_percent: float | None = None
    checkpoint_uri: str | None = None  # the last save
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def ended(self) -> bool:
        """Whether the job has reached COMPLETED, FAILED or CANCELED."""
        from spotline.shared.domain.states import JobStatus

        return self.status in JobStatus.terminal()

    @classmethod
    def of(cls, job: JobDoc) -> JobState:
        return cls(
            job_id=job.job_id,
            user=job.user,
            description=job.description,
            status=str(job.status),
            substatus=str(job.substatus),
            progress=job.progress,
            epoch=job.epoch,
            epochs=job.epochs,
            attempt=job.attempt,
            preemptions=job.preemptions,
            error=job.error,
            metrics=dict(job.metrics),
            machine_id=job.machine_id,
            cost_usd=job.cost_usd,
            savings_percent=job.savings_percent,
            checkpoint_uri=job.checkpoint_uri,
            created_at=job.created_at,
            updated_at=job.updated_at,
        )


@dataclass(frozen=True)
class MachineOffer:
    """One way to run on a catalog machine (``spotline.machines()``): Spot
    (``machine_id`` NAME) or on demand (NAME.od), its price, and how it went."""

    machine_id: str
    provisioning: str  # SPOT or STANDARD (on demand)
    machine_type: str
    gpu_type: str | None
    gpu_count: int
    vcpus: int
    memory_gb: float
    usd_per_hour: float
    capacity: int | None  # more VMs the region's quotas allow; None: unknown
    in_use: int  # live VMs of this machine id
    requests_24h: int  # VM requests in the last 24 hours
    successes_24h: int
