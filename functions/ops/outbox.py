"""Publishing the jobs' state-change events, after the write that made them.

A move of a job appends its ``JobEvent`` to the job's outbox in the same
guarded write (``shared.domain.job_events``). ``OutboxStore`` wraps the
process's store so that every job write is followed, once it has committed,
by publishing what the outbox holds and then forgetting what went out: no
operation has to remember to do it. A function that dies between the write
and the publish leaves the events in the outbox; the next write of the job
(a redelivery) or the reaper's tick (``publish_unpublished``) sends them.

A failed publish never fails the transition: it is logged, the events stay in
the outbox, and the reaper tries again. Copies are possible (a crash between
the publish and the forgetting write, two drainers at once); each copy has
the same ``event_id``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared import logs
from shared.domain.documents import JobDoc
from shared.domain.job_events import WEBHOOK_ATTRIBUTE, webhook_mark, without_published
from shared.ports.bus import Bus
from shared.ports.store import Store

TOPIC = "job_events"
# A notification may wait for the reaper; the transition's function must not.
_PUBLISH_TIMEOUT_S = 10.0


def publish_pending(store: Store, bus: Bus, job: JobDoc) -> JobDoc:
    """Publish ``job``'s outbox in sequence order, then remove what went out
    (a guarded write). Returns the job as stored afterwards.

    Stops at the first failed publish, keeping it and every later event, so
    a consumer never gets an event before the ones it follows.
    """
    sent: set[int] = set()
    mark = {WEBHOOK_ATTRIBUTE: webhook_mark(job)}
    for event in job.pending_events:
        try:
            bus.publish(
                TOPIC,
                event,
                timeout_s=_PUBLISH_TIMEOUT_S,
                event_id=event.event_id,
                job_id=event.job_id,
                **mark,
            )
        except Exception as err:  # any failure: the reaper publishes it later
            logs.warning(
                f"job {job.job_id}: event {event.event_id} not published yet: {err!r}",
                job_id=job.job_id,
                event_id=event.event_id,
            )
            break
        sent.add(event.sequence)
    if not sent:
        return job
    stored = store.update_job(job.job_id, lambda current: without_published(current, sent))
    return stored if stored is not None else job


def publish_unpublished(store: Store, bus: Bus, limit: int = 200) -> int:
    """The reaper's part: publish what crashes left in the outboxes; how many
    events went out."""
    count = 0
    for job in store.unpublished_jobs(limit):
        before = len(job.pending_events)
        count += before - len(publish_pending(store, bus, job).pending_events)
    return count


class OutboxStore:
    """The store, with each job write followed by publishing its outbox.

    Every other call goes to ``inner`` unchanged (``__getattr__``).
    """

    def __init__(self, inner: Store, bus: Callable[[], Bus]) -> None:
        self.inner = inner
        self._bus = bus  # built on first use: most writes have no event

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create_job(self, job: JobDoc) -> bool:
        created = self.inner.create_job(job)
        if created and job.pending_events:
            publish_pending(self.inner, self._bus(), job)
        return created

    def update_job(self, job_id: str, change: Callable[[JobDoc], JobDoc]) -> JobDoc | None:
        stored = self.inner.update_job(job_id, change)
        if stored is None or not stored.pending_events:
            return stored
        return publish_pending(self.inner, self._bus(), stored)
