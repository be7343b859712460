"""The store port: every document spotline keeps, and the contract of each call.

Two adapters implement it: ``FirestoreStore`` (Firestore, in production and on
the emulator) and ``InMemoryStore`` (a process's memory, for fast tests of the
orchestration). ``tests/store_contract.py`` is one suite run against both.

Contract, for every adapter:

* Documents are the pydantic models of ``spotline.shared.domain.documents``; their
  timestamps come back in UTC (a naive one is taken as UTC). What a call
  returns is a copy: changing it changes nothing stored, and changing a model
  after handing it to the store does not change what was stored.
* ``create_*(doc)`` (and ``record_rejection``) writes the document under its
  natural key (job id, instance name, message id) and returns True; when a
  document with that key exists it writes nothing and returns False (a
  redelivered event, not an error).
* ``get_*(key)`` returns the document or None. ``get_jobs(job_ids)``,
  ``get_instances(names)``: the documents found, by key, read together in as
  few round trips as the adapter can (a sweep reads thousands).
* ``update_*(key, change)`` reads the document, applies ``change`` to it and
  writes the result, guarded: when another writer wrote the document between
  the read and the write, the write is refused and ``change`` runs again on the
  fresh document, so no concurrent update is lost. ``change`` must therefore
  be pure and may run more than once. When it returns the document unchanged
  (the same object, or an equal one) nothing is written. Returns the document
  as stored afterwards, or None when there is no such document (nothing is
  created). Contention that outlasts the retries raises ``TransientError``
  with nothing written (the caller raises, and Pub/Sub redelivers).
* ``update_user(user, change)`` is ``update_*`` that first creates
  ``UserDoc(user=user)`` when the user has no document: it never returns None.
* ``list_jobs(statuses, limit, after)``, ``list_instances(statuses, limit,
  after)``: the documents whose ``status`` is one of ``statuses`` (every
  document when None), at most ``limit`` of them, in key order, starting past
  the key ``after`` when given (the next page: pass the last key of this
  one). ``statuses`` must hold 1 to 30 values (Firestore's bounds on an
  ``in`` filter); otherwise ``ValueError``.
  ``stopped_instances(limit, after)``: the instances whose substatus is
  STOPPED, the same way. Both take only ``user``'s instances when it is given
  (a placement can take only its user's VMs: the team's are not read).
  ``instances_of_job(job_id)``: every instance of the
  job, in key order. ``list_users(limit, after)``: every user, in key order,
  paged the same way.
* ``list_job_ids(statuses, limit, after)``, ``list_instance_names(statuses,
  limit, after)``, ``stopped_instance_names(limit, after)``,
  ``list_user_names(limit, after)``: the keys of the same listings, paged the
  same way, without the documents (the reaper's tick, which hands pages of
  keys out). ``get_users(users)``: ``get_jobs`` for users.
* ``unpublished_jobs(limit)``: the jobs whose outbox holds events not yet
  published (``outbox == "pending"``, ``spotline.shared.domain.job_events``), at most
  ``limit`` of them, in key order.
* ``recent_jobs(limit, user, statuses)``: at most ``limit`` jobs, the newest
  (``created_at``) first, ties in descending key order; only the user's when
  ``user`` is given, only those whose ``status`` is one of ``statuses`` when
  given (any number of values). ``limit`` under 1 or an empty ``statuses``:
  ``ValueError``.
* ``put_epoch(job_id, epoch)`` writes or overwrites the epoch's document, keyed
  by the attempt and the epoch number (``epoch_key``): a redelivered event
  overwrites it; a later attempt that records the same epoch again (resumed
  from a save made in it) writes another. ``list_epochs(job_id)`` returns every
  record of the job by attempt, then epoch number (``epoch_order``): in the
  order they were made.
* ``put_queue(entry)`` enqueues or replaces the job's entry (one per job);
  ``delete_queue(job_id)`` removes it, and removing a missing entry succeeds.
  ``due_queue(now, limit)``: the entries with ``not_before <= now``, earliest
  ``not_before`` first, at most ``limit``. ``queue_of_user(user)``: every entry
  of the user, earliest ``enqueued_at`` first. Ties go in key order.
* ``recent_rejections(limit)``: at most ``limit`` rejections, the newest
  (``at``) first.
* ``seed_machines(catalog)`` writes each machine under its id, again and again
  with the same result; ``get_machine(machine_id)`` reads one back.
* ``record_request(machine_id, ok, now)`` counts one VM request (and one
  success when ``ok``) in the hour of ``now``; Spot (``NAME``) and on demand
  (``NAME.od``) are different machine ids. Concurrent counts are never lost.
  ``availability(machine_id, since)`` returns ``(requests, successes)`` summed
  over the hours that start at or after ``since``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Protocol

from spotline.shared.domain.catalog import Machine
from spotline.shared.domain.documents import (
    EpochDoc,
    InstanceDoc,
    JobDoc,
    QueueEntry,
    Rejection,
    UserDoc,
)


class Store(Protocol):
    # -- jobs
    def create_job(self, job: JobDoc) -> bool: ...

    def get_job(self, job_id: str) -> JobDoc | None: ...

    def get_jobs(self, job_ids: Iterable[str]) -> dict[str, JobDoc]: ...

    def update_job(self, job_id: str, change: Callable[[JobDoc], JobDoc]) -> JobDoc | None: ...

    def list_jobs(
        self, statuses: Iterable[str] | None = None, limit: int = 200, after: str | None = None
    ) -> list[JobDoc]: ...

    def list_job_ids(
        self, statuses: Iterable[str], limit: int = 1000, after: str | None = None
    ) -> list[str]: ...

    def unpublished_jobs(self, limit: int = 200) -> list[JobDoc]: ...

    def recent_jobs(
        self,
        limit: int = 50,
        user: str | None = None,
        statuses: Iterable[str] | None = None,
    ) -> list[JobDoc]: ...

    def put_epoch(self, job_id: str, epoch: EpochDoc) -> None: ...

    def list_epochs(self, job_id: str) -> list[EpochDoc]: ...

    # -- instances
    def create_instance(self, instance: InstanceDoc) -> bool: ...

    def get_instance(self, name: str) -> InstanceDoc | None: ...

    def get_instances(self, names: Iterable[str]) -> dict[str, InstanceDoc]: ...

    def update_instance(
        self, name: str, change: Callable[[InstanceDoc], InstanceDoc]
    ) -> InstanceDoc | None: ...

    def instances_of_job(self, job_id: str) -> list[InstanceDoc]: ...

    def list_instances(
        self,
        statuses: Iterable[str] | None = None,
        limit: int = 500,
        after: str | None = None,
        user: str | None = None,
    ) -> list[InstanceDoc]: ...

    def stopped_instances(
        self, limit: int = 500, after: str | None = None, user: str | None = None
    ) -> list[InstanceDoc]: ...

    def list_instance_names(
        self, statuses: Iterable[str], limit: int = 1000, after: str | None = None
    ) -> list[str]: ...

    def stopped_instance_names(self, limit: int = 1000, after: str | None = None) -> list[str]: ...

    # -- queue
    def put_queue(self, entry: QueueEntry) -> None: ...

    def get_queue(self, job_id: str) -> QueueEntry | None: ...

    def due_queue(self, now: datetime, limit: int = 50) -> list[QueueEntry]: ...

    def delete_queue(self, job_id: str) -> None: ...

    def queue_of_user(self, user: str) -> list[QueueEntry]: ...

    # -- users
    def get_user(self, user: str) -> UserDoc | None: ...

    def update_user(self, user: str, change: Callable[[UserDoc], UserDoc]) -> UserDoc: ...

    def get_users(self, users: Iterable[str]) -> dict[str, UserDoc]: ...

    def list_users(self, limit: int = 1000, after: str | None = None) -> list[UserDoc]: ...

    def list_user_names(self, limit: int = 1000, after: str | None = None) -> list[str]: ...

    # -- machines
    def seed_machines(self, catalog: dict[str, Machine]) -> None: ...

    def get_machine(self, machine_id: str) -> Machine | None: ...

    def record_request(self, machine_id: str, ok: bool, now: datetime) -> None: ...

    def availability(self, machine_id: str, since: datetime) -> tuple[int, int]: ...

    # -- rejected messages
    def record_rejection(self, rejection: Rejection) -> bool: ...

    def get_rejection(self, message_id: str) -> Rejection | None: ...

    def recent_rejections(self, limit: int = 20) -> list[Rejection]: ...
