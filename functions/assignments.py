"""What a VM is told: the job's assignment, in its metadata."""

from __future__ import annotations

from functions import deps
from shared.assignment import Assignment
from shared.documents import JobDoc


def assignment_for(job: JobDoc) -> Assignment:
    settings = deps.settings()
    prefix = f"{settings.storage_root.rstrip('/')}/jobs/{job.job_id}"
    return Assignment(
        job_id=job.job_id,
        attempt=job.attempt,
        project=settings.project,
        spec=job.spec,
        checkpoint_dir=f"{prefix}/checkpoints",
        output_dir=f"{prefix}/outputs",
        heartbeat_s=settings.heartbeat_s,
    )
