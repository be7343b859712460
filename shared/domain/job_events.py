"""Job state-change notifications: the event's schema, and the job's outbox.

Every change of a job's status or substatus becomes a ``JobEvent`` that
spotline publishes on ``spotline-job-events`` for anyone outside to follow
(a chat bot, a dashboard, a per-job webhook). Publishing cannot happen inside
the guarded write that moves the job (a Firestore write may run again; a cloud
call must come after it commits), and a function may die between the write
and the publish. So the move appends the event to the job's own outbox,
``pending_events``, in the same write; whoever wrote it publishes right after
and then forgets what went out, and the reaper publishes whatever a crash left
behind. Delivery is therefore at least once: a consumer keeps the highest
``sequence`` it handled per job, or dedupes by ``event_id``
(``{job_id}/{sequence}``), which a copy of an event always repeats.

The schema is versioned (``schema_version``): a field is only ever added
within a version; a change in meaning or a removal takes a new version.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from spotline.shared.domain.documents import JobDoc

SCHEMA_VERSION: Literal[1] = 1
# The message attribute that says whether the event's job has a webhook_url:
# "1" or "0". notify_webhook skips a "0" with no read; an event without it
# (published before it existed) is looked up as before.
WEBHOOK_ATTRIBUTE = "webhook"
HAS_WEBHOOK, NO_WEBHOOK = "1", "0"


class JobEvent(BaseModel):
    """One change of a job's state, as published (JSON) and as kept in the outbox."""

    model_config = ConfigDict(extra="ignore")

    schema_version: Literal[1] = SCHEMA_VERSION
    event_id: str  # "{job_id}/{sequence}": the same in every copy of the event
    job_id: str
    user: str
    sequence: int  # 1, 2, 3, ... per job, in the order of the changes
    status: str
    substatus: str
    previous_status: str | None  # None: the job was just submitted
    previous_substatus: str | None
    attempt: int
    at: datetime  # when the change happened (UTC)
    reason: str = ""  # the history note: why it moved ("submitted", "attempt 2", ...)
    error: str | None = None  # FAILED or CANCELED: the sentence a person can act on
    progress: str = "0/0"  # "epoch/epochs"
    preemptions: int = 0
    cost_usd: float = 0.0  # the VM time paid so far
    on_demand_cost_usd: float = 0.0  # the same time at on-demand prices


def with_event(job: JobDoc, previous: JobDoc | None, at: datetime, reason: str) -> JobDoc:
    """``job`` with the event of its move from ``previous`` added to its outbox.

    ``previous`` None: the job was just submitted. The error of an ending is
    not known yet when it moves (``fail_job`` sets it after): the event takes
    the reason, which carries the same sentence.
    """
    sequence = job.event_sequence + 1
    event = JobEvent(
        event_id=f"{job.job_id}/{sequence}",
        job_id=job.job_id,
        user=job.user,
        sequence=sequence,
        status=str(job.status),
        substatus=str(job.substatus),
        previous_status=str(previous.status) if previous else None,
        previous_substatus=str(previous.substatus) if previous else None,
        attempt=job.attempt,
        at=at,
        reason=reason,
        error=job.error,
        progress=job.progress,
        preemptions=job.preemptions,
        cost_usd=job.cost_usd,
        on_demand_cost_usd=job.on_demand_cost_usd,
    )
    return job.model_copy(
        update={"event_sequence": sequence, "pending_events": [*job.pending_events, event]}
    )


def webhook_mark(job: JobDoc) -> str:
    """The ``webhook`` attribute of the job's events. The spec is fixed at
    submission, so every event of a job carries the same mark."""
    return HAS_WEBHOOK if job.spec.webhook_url else NO_WEBHOOK


def without_published(job: JobDoc, sequences: AbstractSet[int]) -> JobDoc:
    """``job`` with the events of ``sequences`` gone from its outbox (they were
    published); the same object when none of them is there any more."""
    kept = [event for event in job.pending_events if event.sequence not in sequences]
    if len(kept) == len(job.pending_events):
        return job
    return job.model_copy(update={"pending_events": kept})
