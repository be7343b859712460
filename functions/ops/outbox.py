"""Publishing the jobs' state-change events, after the write that made them.

A move of a job appends its ``JobEvent`` to the job's outbox in the same
guarded write (``spotline.shared.domain.job_events``). ``OutboxStore`` wraps the
process's store so that every job write is followed, once it has committed,
by publishing what the outbox holds: no operation has to remember to do it.
A function that dies between the write and the publish leaves the events in
the outbox; the next write of the job (a redelivery) or the reaper's tick
(``publish_unpublished``) sends them.

What went out must then leave the outbox, which takes a write. Within one
request (``one_request``, which the handlers' wrapper opens) that write is
not made after each publish: the sequences published are remembered, and the
job's next write in the same request drops them as it makes its own change;
what is left is dropped in one write per job when the request ends. A waiting
submission moved its job twice and wrote twice more to forget each event;
now once, at the end. Outside a request (tests, scripts) each publish is
forgotten at once, as before.

A failed publish never fails the transition: it is logged, the events stay in
the outbox, and the reaper tries again. Copies are possible (a crash between
the publish and the forgetting write, two drainers at once); each copy has
the same ``event_id``. An event never leaves the outbox before it was
published, and every publisher sends the outbox in sequence order, skipping
only what its own request sent already: no consumer gets an event before the
ones it follows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from spotline.shared import logs
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.job_events import WEBHOOK_ATTRIBUTE, webhook_mark, without_published
from spotline.shared.ports.bus import Bus
from spotline.shared.ports.store import Store

TOPIC = "job_events"
# A notification may wait for the reaper; the transition's function must not.
_PUBLISH_TIMEOUT_S = 10.0


@dataclass
class _Sent:
    """A job's events this request published and its outbox may still hold."""

    store: Store  # the store under the outbox, which the forgetting write goes to
    sequences: set[int] = field(default_factory=set)


# (id of the store, job id) -> what went out; None outside a request. A
# ContextVar: each thread serving a request (gunicorn's) has its own.
_request: ContextVar[dict[tuple[int, str], _Sent] | None] = ContextVar(
    "outbox_request", default=None
)


@contextmanager
def one_request() -> Iterator[None]:
    """Within it, the events a job write publishes are forgotten in the job's
    next write, or at the end in one write per job.

    The end's writes are made when the request returns or raises an
    ``Exception`` (a transient error: what went out need not go again); a
    ``BaseException`` stands for the process dying, which writes nothing. A
    forgetting write that fails is logged: the events stay, and the reaper
    sends copies.
    """
    sent: dict[tuple[int, str], _Sent] = {}
    token = _request.set(sent)
    failed: Exception | None = None
    try:
        yield
    except Exception as err:
        failed = err
    finally:  # a BaseException too: this thread's next request starts afresh
        _request.reset(token)
    _forget(sent)
    if failed is not None:
        raise failed


def _forget(sent: dict[tuple[int, str], _Sent]) -> None:
    for (_, job_id), entry in sent.items():
        if not entry.sequences:
            continue
        published = frozenset(entry.sequences)
        try:
            entry.store.update_job(job_id, _dropping(published))
        except Exception as err:  # the reaper publishes them again (copies)
            logs.warning(
                f"job {job_id}: published events {sorted(published)} left in the outbox: {err!r}",
                job_id=job_id,
            )


def _dropping(published: frozenset[int]) -> Callable[[JobDoc], JobDoc]:
    """The change that removes ``published`` from a job's outbox."""
    return lambda job: without_published(job, published)


def _entry(store: Store, job_id: str, *, make: bool) -> _Sent | None:
    """This request's record of ``job_id`` on ``store``; None outside a request
    (or none yet and not ``make``)."""
    sent = _request.get()
    if sent is None:
        return None
    key = (id(store), job_id)
    if make and key not in sent:
        sent[key] = _Sent(store)
    return sent.get(key)


def _publish(bus: Bus, job: JobDoc, skip: set[int]) -> set[int]:
    """Publish ``job``'s outbox in sequence order, less ``skip`` (published by
    this request already); the sequences that went out.

    Stops at the first failed publish, keeping it and every later event, so
    a consumer never gets an event before the ones it follows.
    """
    sent: set[int] = set()
    mark = {WEBHOOK_ATTRIBUTE: webhook_mark(job)}
    for event in job.pending_events:
        if event.sequence in skip:
            continue
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
    return sent


def publish_pending(store: Store, bus: Bus, job: JobDoc) -> int:
    """Publish ``job``'s outbox in sequence order, then remove what went out
    in one guarded write (with what this request published of it before);
    how many events went out."""
    inner = store.inner if isinstance(store, OutboxStore) else store
    return _publish_and_forget(inner, bus, job)[0]


def _publish_and_forget(store: Store, bus: Bus, job: JobDoc) -> tuple[int, JobDoc]:
    """``publish_pending`` on the store under the outbox; also the job as
    stored afterwards."""
    entry = _entry(store, job.job_id, make=False)
    before = set(entry.sequences) if entry is not None else set()
    sent = _publish(bus, job, before)
    if not sent and not before:
        return 0, job
    gone = frozenset(sent | before)
    stored = store.update_job(job.job_id, _dropping(gone))
    if entry is not None:
        entry.sequences.clear()
    return len(sent), stored if stored is not None else job


def publish_unpublished(store: Store, bus: Bus, limit: int = 200) -> int:
    """The reaper's part: publish what crashes left in the outboxes; how many
    events went out. What its own request published is not sent again."""
    return sum(publish_pending(store, bus, job) for job in store.unpublished_jobs(limit))


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
            self._published(job)
        return created

    def update_job(self, job_id: str, change: Callable[[JobDoc], JobDoc]) -> JobDoc | None:
        entry = _entry(self.inner, job_id, make=False)
        if entry is None or not entry.sequences:
            stored = self.inner.update_job(job_id, change)
        else:  # the write also drops what this request published before
            gone = frozenset(entry.sequences)
            stored = self.inner.update_job(
                job_id, lambda current: change(without_published(current, gone))
            )
            if stored is not None:
                entry.sequences &= {event.sequence for event in stored.pending_events}
        if stored is None or not stored.pending_events:
            return stored
        return self._published(stored)

    def _published(self, job: JobDoc) -> JobDoc:
        """Publish ``job``'s outbox (it has just been written). In a request,
        remember what went out; outside one, forget it now. The job as stored."""
        entry = _entry(self.inner, job.job_id, make=True)
        if entry is None:
            return _publish_and_forget(self.inner, self._bus(), job)[1]
        entry.sequences |= _publish(self._bus(), job, entry.sequences)
        return job
