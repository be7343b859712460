"""The in-memory store: the store port kept in a process's memory.

It keeps the port's contract for real, so orchestration tested against it
behaves as it does on Firestore: documents are held as the plain values
Firestore would hold (``to_firestore``) and every read validates a fresh model
(callers never share an object with the store); each document has a version,
and ``update_*`` computes its change outside the lock and writes only if the
version is still the one it read, re-applying the change otherwise, as
Firestore's last-update-time precondition forces. It imports nothing from
Google: tests and tools that use it start fast and need no emulator.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from spotline.shared.adapters.firestore_limits import checked_key, utc
from spotline.shared.adapters.firestore_limits import stored as firestore_fields
from spotline.shared.domain.catalog import Machine
from spotline.shared.domain.documents import (
    EpochDoc,
    InstanceDoc,
    JobDoc,
    QueueEntry,
    Rejection,
    UserDoc,
    epoch_key,
    epoch_order,
)
from spotline.shared.domain.errors import TransientError
from spotline.shared.retries import CONTENTION, Backoff, retried

Doc = TypeVar("Doc", bound=BaseModel)
JOBS, INSTANCES, QUEUE, REJECTED, USERS, MACHINES = (
    "jobs",
    "instances",
    "queue",
    "rejected",
    "users",
    "machines",
)
# Firestore's bound on the values of an ``in`` filter.
_IN_LIMIT = 30


class _Stale(Exception):
    """A document was written since it was read: the change is applied again."""


class InMemoryStore:
    """``spotline.shared.ports.store.Store`` in memory, safe to share between threads."""

    def __init__(self, contention: Backoff = CONTENTION) -> None:
        """``contention``: how a write that lost a race is tried again."""
        self._contention = contention
        self._lock = threading.Lock()
        # A document's version is the store-wide sequence number of its last
        # write, as Firestore's update time is: a document deleted and created
        # again never matches a version read before.
        self._sequence = itertools.count(1)
        # collection -> key -> (version, fields as Firestore would store them)
        self._docs: dict[str, dict[str, tuple[int, dict[str, Any]]]] = {}
        # (job id, epoch) and (machine id, hour key) live apart: subcollections.
        self._epochs: dict[str, dict[str, dict[str, Any]]] = {}
        self._hours: dict[str, dict[str, dict[str, Any]]] = {}

    def version(self, collection: str, key: str) -> int | None:
        """The version of ``{collection}/{key}``, changed by every write (None: absent).

        Not part of the port: tests read it where they would read Firestore's
        update time, to see that a change that changed nothing wrote nothing.
        """
        with self._lock:
            stored = self._docs.get(collection, {}).get(key)
        return stored[0] if stored is not None else None

    # -- jobs -------------------------------------------------------------

    def create_job(self, job: JobDoc) -> bool:
        return self._create(JOBS, job.job_id, job)

    def get_job(self, job_id: str) -> JobDoc | None:
        return self._get(JOBS, job_id, JobDoc)

    def get_jobs(self, job_ids: Iterable[str]) -> dict[str, JobDoc]:
        found = {job_id: self.get_job(job_id) for job_id in set(job_ids)}
        return {job_id: job for job_id, job in found.items() if job is not None}

    def update_job(self, job_id: str, change: Callable[[JobDoc], JobDoc]) -> JobDoc | None:
        return self._update(JOBS, job_id, JobDoc, change)

    def list_jobs(
        self, statuses: Iterable[str] | None = None, limit: int = 200, after: str | None = None
    ) -> list[JobDoc]:
        return self._list(JOBS, JobDoc, "status", statuses, limit, after)

    def list_job_ids(
        self, statuses: Iterable[str], limit: int = 1000, after: str | None = None
    ) -> list[str]:
        return self._keys(JOBS, "status", statuses, limit, after)

    def unpublished_jobs(self, limit: int = 200) -> list[JobDoc]:
        return self._list(JOBS, JobDoc, "outbox", ["pending"], limit)

    def recent_jobs(
        self,
        limit: int = 50,
        user: str | None = None,
        statuses: Iterable[str] | None = None,
    ) -> list[JobDoc]:
        if limit < 1:
            raise ValueError(f"limit: {limit}; at least 1")
        wanted = None if statuses is None else {str(status) for status in statuses}
        if wanted is not None and not wanted:
            raise ValueError("statuses: empty; give at least one status, or None for any")
        # Firestore breaks ties of a descending order by key, descending too.
        rows = sorted(
            (
                (fields["created_at"], key, fields)
                for key, fields in self._snapshot(JOBS)
                if (user is None or fields["user"] == user)
                and (wanted is None or fields["status"] in wanted)
            ),
            key=lambda row: (row[0], row[1]),
            reverse=True,
        )
        return [JobDoc.model_validate(fields) for _, _, fields in rows[:limit]]

    def put_epoch(self, job_id: str, epoch: EpochDoc) -> None:
        checked_key(job_id)
        with self._lock:
            self._epochs.setdefault(job_id, {})[epoch_key(epoch)] = firestore_fields(epoch)

    def list_epochs(self, job_id: str) -> list[EpochDoc]:
        with self._lock:
            stored = list(self._epochs.get(job_id, {}).values())
        return sorted((EpochDoc.model_validate(fields) for fields in stored), key=epoch_order)

    # -- instances --------------------------------------------------------

    def create_instance(self, instance: InstanceDoc) -> bool:
        return self._create(INSTANCES, instance.name, instance)

    def get_instance(self, name: str) -> InstanceDoc | None:
        return self._get(INSTANCES, name, InstanceDoc)

    def get_instances(self, names: Iterable[str]) -> dict[str, InstanceDoc]:
        found = {name: self.get_instance(name) for name in set(names)}
        return {name: instance for name, instance in found.items() if instance is not None}

    def update_instance(
        self, name: str, change: Callable[[InstanceDoc], InstanceDoc]
    ) -> InstanceDoc | None:
        return self._update(INSTANCES, name, InstanceDoc, change)

    def instances_of_job(self, job_id: str) -> list[InstanceDoc]:
        return self._list(INSTANCES, InstanceDoc, "job_id", [job_id], None)

    def list_instances(
        self,
        statuses: Iterable[str] | None = None,
        limit: int = 500,
        after: str | None = None,
        user: str | None = None,
    ) -> list[InstanceDoc]:
        return self._list(INSTANCES, InstanceDoc, "status", statuses, limit, after, user)

    def stopped_instances(
        self, limit: int = 500, after: str | None = None, user: str | None = None
    ) -> list[InstanceDoc]:
        return self._list(INSTANCES, InstanceDoc, "substatus", ["STOPPED"], limit, after, user)

    def list_instance_names(
        self, statuses: Iterable[str], limit: int = 1000, after: str | None = None
    ) -> list[str]:
        return self._keys(INSTANCES, "status", statuses, limit, after)

    def stopped_instance_names(self, limit: int = 1000, after: str | None = None) -> list[str]:
        return self._keys(INSTANCES, "substatus", ["STOPPED"], limit, after)

    # -- queue ------------------------------------------------------------

    def put_queue(self, entry: QueueEntry) -> None:
        self._set(QUEUE, entry.job_id, entry)

    def get_queue(self, job_id: str) -> QueueEntry | None:
        return self._get(QUEUE, job_id, QueueEntry)

    def due_queue(self, now: datetime, limit: int = 50) -> list[QueueEntry]:
        due = [
            (fields["not_before"], key, fields)
            for key, fields in self._snapshot(QUEUE)
            if fields["not_before"] <= utc(now)
        ]
        due.sort(key=lambda row: (row[0], row[1]))
        return [QueueEntry.model_validate(fields) for _, _, fields in due[:limit]]

    def delete_queue(self, job_id: str) -> None:
        with self._lock:
            self._docs.get(QUEUE, {}).pop(job_id, None)

    def queue_of_user(self, user: str) -> list[QueueEntry]:
        mine = [(f["enqueued_at"], k, f) for k, f in self._snapshot(QUEUE) if f["user"] == user]
        mine.sort(key=lambda row: (row[0], row[1]))
        return [QueueEntry.model_validate(fields) for _, _, fields in mine]

    # -- users --------------------------------------------------------------

    def get_user(self, user: str) -> UserDoc | None:
        return self._get(USERS, user, UserDoc)

    def update_user(self, user: str, change: Callable[[UserDoc], UserDoc]) -> UserDoc:
        updated = self._update(USERS, user, UserDoc, change)
        if updated is None:
            self._create(USERS, user, UserDoc(user=user))
            updated = self._update(USERS, user, UserDoc, change)
        assert updated is not None  # created just above; users are never deleted
        return updated

    def get_users(self, users: Iterable[str]) -> dict[str, UserDoc]:
        found = {user: self.get_user(user) for user in set(users)}
        return {user: doc for user, doc in found.items() if doc is not None}

    def list_users(self, limit: int = 1000, after: str | None = None) -> list[UserDoc]:
        return self._list(USERS, UserDoc, "user", None, limit, after)

    def list_user_names(self, limit: int = 1000, after: str | None = None) -> list[str]:
        return self._keys(USERS, "user", None, limit, after)

    # -- machines -------------------------------------------------------------

    def seed_machines(self, catalog: dict[str, Machine]) -> None:
        with self._lock:
            machines = self._docs.setdefault(MACHINES, {})
            for machine in catalog.values():
                machines[machine.machine_id] = (next(self._sequence), asdict(machine))

    def get_machine(self, machine_id: str) -> Machine | None:
        with self._lock:
            stored = self._docs.get(MACHINES, {}).get(machine_id)
        if stored is None:
            return None
        fields = stored[1]
        return Machine(**{field.name: fields[field.name] for field in dataclass_fields(Machine)})

    def record_request(self, machine_id: str, ok: bool, now: datetime) -> None:
        # The same hour key and hour start as Firestore's hourly documents.
        key = now.strftime("%Y%m%d%H")
        with self._lock:
            hour = self._hours.setdefault(machine_id, {}).setdefault(
                key,
                {
                    "hour": utc(now.replace(minute=0, second=0, microsecond=0)),
                    "requests": 0,
                    "successes": 0,
                },
            )
            hour["requests"] += 1
            hour["successes"] += 1 if ok else 0

    def availability(self, machine_id: str, since: datetime) -> tuple[int, int]:
        with self._lock:
            hours = [dict(hour) for hour in self._hours.get(machine_id, {}).values()]
        recent = [hour for hour in hours if hour["hour"] >= utc(since)]
        return sum(h["requests"] for h in recent), sum(h["successes"] for h in recent)

    # -- rejected messages ------------------------------------------------

    def record_rejection(self, rejection: Rejection) -> bool:
        return self._create(REJECTED, rejection.message_id, rejection)

    def get_rejection(self, message_id: str) -> Rejection | None:
        return self._get(REJECTED, message_id, Rejection)

    def recent_rejections(self, limit: int = 20) -> list[Rejection]:
        # Firestore breaks ties of a descending order by key, descending too.
        rows = sorted(
            ((fields["at"], key, fields) for key, fields in self._snapshot(REJECTED)),
            key=lambda row: (row[0], row[1]),
            reverse=True,
        )
        return [Rejection.model_validate(fields) for _, _, fields in rows[:limit]]

    # -- the guarded primitives -------------------------------------------

    def _create(self, collection: str, key: str, doc: BaseModel) -> bool:
        key, fields = checked_key(key), firestore_fields(doc)
        with self._lock:
            documents = self._docs.setdefault(collection, {})
            if key in documents:
                return False
            documents[key] = (next(self._sequence), fields)
        return True

    def _set(self, collection: str, key: str, doc: BaseModel) -> None:
        key, fields = checked_key(key), firestore_fields(doc)
        with self._lock:
            documents = self._docs.setdefault(collection, {})
            documents[key] = (next(self._sequence), fields)

    def _get(self, collection: str, key: str, model: type[Doc]) -> Doc | None:
        checked_key(key)
        with self._lock:
            stored = self._docs.get(collection, {}).get(key)
        return model.model_validate(stored[1]) if stored is not None else None

    def _update(
        self, collection: str, key: str, model: type[Doc], change: Callable[[Doc], Doc]
    ) -> Doc | None:
        checked_key(key)

        def read_change_write() -> Doc | None:
            with self._lock:
                stored = self._docs.get(collection, {}).get(key)
            if stored is None:
                return None
            version, fields = stored
            current = model.model_validate(fields)
            # Outside the lock, as a Firestore writer computes between its read
            # and its write: another writer may get in, and the version tells.
            changed = change(current)
            if changed is current or changed == current:
                return current
            new_fields = firestore_fields(changed)
            with self._lock:
                documents = self._docs[collection]
                if key not in documents or documents[key][0] != version:
                    # Written (or deleted) since the read: re-applied after a
                    # wait, as the Firestore store does.
                    raise _Stale(f"{collection}/{key}")
                documents[key] = (next(self._sequence), new_fields)
            return model.model_validate(new_fields)

        return retried(
            read_change_write,
            lambda exc: isinstance(exc, _Stale),
            self._contention,
            give_up=lambda _: TransientError(
                f"{collection}/{key}: too much write contention, try again"
            ),
        )

    def _snapshot(self, collection: str) -> list[tuple[str, dict[str, Any]]]:
        """The collection's documents in key order (Firestore's default order).

        The field dicts are the stored ones: callers only read them and
        validate fresh models from them.
        """
        with self._lock:
            documents = dict(self._docs.get(collection, {}))
        return [(key, documents[key][1]) for key in sorted(documents)]

    def _keys(
        self,
        collection: str,
        field: str,
        values: Iterable[str] | None,
        limit: int,
        after: str | None,
    ) -> list[str]:
        return [doc[0] for doc in self._rows(collection, field, values, after, None)[:limit]]

    def _list(
        self,
        collection: str,
        model: type[Doc],
        field: str,
        values: Iterable[str] | None,
        limit: int | None,
        after: str | None = None,
        user: str | None = None,
    ) -> list[Doc]:
        rows = self._rows(collection, field, values, after, user)
        return [model.model_validate(fields) for _, fields in rows[:limit]]

    def _rows(
        self,
        collection: str,
        field: str,
        values: Iterable[str] | None,
        after: str | None,
        user: str | None,
    ) -> list[tuple[str, dict[str, Any]]]:
        wanted = [str(value) for value in values] if values is not None else None
        if wanted is not None and not 0 < len(wanted) <= _IN_LIMIT:
            # Firestore refuses such an ``in`` filter; fail here the same way.
            raise ValueError(f"{field} in {wanted}: between 1 and {_IN_LIMIT} values")
        if user is not None and wanted is not None and len(wanted) > 1:
            raise ValueError(f"{field} in {wanted} with a user: give one value")
        return [
            (key, fields)
            for key, fields in self._snapshot(collection)
            if (wanted is None or fields.get(field) in wanted)
            and (after is None or key > after)
            and (user is None or fields.get("user") == user)
        ]
