"""What a VM is told: the job's assignment, in its metadata."""

from __future__ import annotations

from functions import deps
from shared.contract.assignment import Assignment
from shared.contract.cluster import master_port
from shared.domain.documents import JobDoc
from shared.domain.placement import node_names


def assignment_for(job: JobDoc) -> Assignment:
    settings = deps.settings()
    prefix = settings.job_prefix(job.job_id)
    nodes = node_names(job.job_id, job.attempt, job.spec.nodes) if job.spec.nodes > 1 else []
    # Nodes reach each other by VM name (internal DNS); the local cloud's "VMs"
    # share loopback.
    hosts = ["127.0.0.1"] * len(nodes) if settings.compute_endpoint else list(nodes)
    return Assignment(
        nodes=nodes,
        hosts=hosts,
        master_port=master_port(job.job_id, job.attempt) if nodes else 0,
        job_id=job.job_id,
        attempt=job.attempt,
        project=settings.project,
        spec=job.spec,
        checkpoint_dir=f"{prefix}/checkpoints",
        output_dir=f"{prefix}/outputs",
        heartbeat_s=settings.heartbeat_s,
    )
