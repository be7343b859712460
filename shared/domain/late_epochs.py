"""A gang's lost node's late epoch reports. Pure.

A node replaced within its attempt (``node_replacement``) is no longer one
of the job's nodes, so its events are stale (``lifecycle.check_current``).
But an epoch it reported before its loss may be heard after it, and node 0
is the node that reports epochs: dropped, the epoch's step and metrics were
missing from the job and its history. Such a report is kept when it comes
from a VM that was a node of the job's current attempt (a node being
replaced, or one on the attempt's record as replaced); its token is checked
first as any event's (``event_auth``: a replaced node 0 holds the attempt's,
a lost replacement its own only while it is the node being replaced). It
only ever moves the job forward: a newer epoch at no lower step, on a job
still running; its substatus, and its VMs' liveness (the stall clock), are
left as they are. A VM that was never a node of the attempt, or one of an
earlier attempt, stays stale.
"""

from __future__ import annotations

from datetime import datetime

from spotline.shared.contract.events import EpochDone
from spotline.shared.domain import lifecycle, pending_nodes
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.states import JobStatus


def former_node(job: JobDoc, instance: str, attempt: int) -> bool:
    """Whether ``instance`` was a node of ``job``'s current ``attempt``, since replaced."""
    if attempt != job.attempt or instance in lifecycle.current_vms(job):
        return False
    if pending_nodes.of_lost(job, instance) is not None:
        return True
    return any(
        replaced.lost == instance
        for record in job.attempts
        if record.attempt == attempt
        for replaced in record.replaced_nodes
    )


def epoch_done(job: JobDoc, event: EpochDone, now: datetime) -> JobDoc:
    """The job after ``event``: ``lifecycle.epoch_done``, or a replaced
    node's late report kept as the module says.

    Raises:
        lifecycle.StaleEvent, InvalidMessage: as ``lifecycle.epoch_done``.
    """
    if not former_node(job, event.instance, event.attempt):
        return lifecycle.epoch_done(job, event, now)
    if not lifecycle.within_epochs(job, event):
        raise InvalidMessage(
            f"job {job.job_id}: epoch {event.epoch}/{event.epochs} from {event.instance} "
            f"is beyond the spec's {job.spec.epochs} epochs"
        )
    if job.status in JobStatus.terminal():
        return job
    if event.step < job.step:
        return job
    return lifecycle.record_progress(job, event, now)
