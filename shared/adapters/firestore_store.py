"""The Firestore store: every document spotline keeps, with guarded writes.

It implements ``spotline.shared.ports.store.Store``; the port's docstring is the contract.

Writes are guarded instead of transactional: ``create()`` fails when the
document exists, and ``update_*`` re-reads, re-applies a pure change and writes
with a last-update-time precondition, retrying when someone else wrote first.
The Firestore emulator can stall contended transactions for tens of seconds,
and a transaction may run its function again, so none are used here. Those
primitives, and the client, are ``spotline.shared.adapters.firestore_guarded``'s; this
module holds what each collection's calls make of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Any

from spotline.shared.adapters.firestore_guarded import (
    EPOCHS,
    INSTANCES,
    JOBS,
    MACHINES,
    QUEUE,
    REJECTED,
    USERS,
    GuardedDocuments,
)
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
    to_firestore,
)

# The collections, for the dashboard and the listeners that name them.
__all__ = [
    "EPOCHS",
    "INSTANCES",
    "JOBS",
    "MACHINES",
    "QUEUE",
    "REJECTED",
    "USERS",
    "FirestoreStore",
]


class FirestoreStore(GuardedDocuments):
    """Typed access to jobs, instances, the queue and rejected messages in Firestore."""

    # -- jobs -------------------------------------------------------------

    def create_job(self, job: JobDoc) -> bool:
        """Create ``jobs/{id}``; False when it already exists (a redelivery)."""
        return self._create(JOBS, job.job_id, job)

    def get_job(self, job_id: str) -> JobDoc | None:
        return self._get(JOBS, job_id, JobDoc)

    def get_jobs(self, job_ids: Iterable[str]) -> dict[str, JobDoc]:
        return self._get_all(JOBS, job_ids, JobDoc)

    def update_job(self, job_id: str, change: Callable[[JobDoc], JobDoc]) -> JobDoc | None:
        """Apply ``change`` (pure; may run more than once) with a guarded write.

        Returns the job as stored afterwards, or None when there is no such job.
        """
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
        return self._list(JOBS, JobDoc, "outbox", ["pending"], limit, None)

    def recent_jobs(
        self,
        limit: int = 50,
        user: str | None = None,
        statuses: Iterable[str] | None = None,
    ) -> list[JobDoc]:
        """The newest jobs first, filtered here rather than by the query.

        ``where(user ==)`` or ``where(status in)`` with ``order_by(created_at)``
        needs a composite index, which a deployment would have to declare and
        wait minutes for, and which the emulator never asks for: a missing one
        would pass every test and fail in production. ``created_at`` alone has
        Firestore's automatic single-field index, so the ordered query always
        runs; the cost is reading the jobs newer than the last one shown that
        the filters drop, which a person's job list bears.
        """
        from google.cloud import firestore

        wanted = _recent_filters(limit, statuses)
        query = self.client.collection(JOBS).order_by(
            "created_at", direction=firestore.Query.DESCENDING
        )
        found: list[JobDoc] = []
        for snap in query.stream():
            fields = snap.to_dict() or {}
            if (user is None or fields.get("user") == user) and (
                wanted is None or fields.get("status") in wanted
            ):
                found.append(JobDoc.model_validate(fields))
                if len(found) == limit:
                    break
        return found

    def put_epoch(self, job_id: str, epoch: EpochDoc) -> None:
        """Write ``jobs/{id}/epochs/{attempt}-{epoch}``: a redelivered event
        overwrites the same document, a later attempt's record of the same
        epoch is another one."""
        ref = self.client.collection(JOBS).document(job_id).collection(EPOCHS)
        ref.document(epoch_key(epoch)).set(to_firestore(epoch))

    def list_epochs(self, job_id: str) -> list[EpochDoc]:
        ref = self.client.collection(JOBS).document(job_id).collection(EPOCHS)
        # Sorted here, not by the query: documents written under the epoch
        # number alone (before attempts had keys) sort among the others.
        return sorted(
            (EpochDoc.model_validate(snap.to_dict()) for snap in ref.stream()), key=epoch_order
        )

    # -- instances --------------------------------------------------------

    def create_instance(self, instance: InstanceDoc) -> bool:
        return self._create(INSTANCES, instance.name, instance)

    def get_instance(self, name: str) -> InstanceDoc | None:
        return self._get(INSTANCES, name, InstanceDoc)

    def get_instances(self, names: Iterable[str]) -> dict[str, InstanceDoc]:
        return self._get_all(INSTANCES, names, InstanceDoc)

    def update_instance(
        self, name: str, change: Callable[[InstanceDoc], InstanceDoc]
    ) -> InstanceDoc | None:
        return self._update(INSTANCES, name, InstanceDoc, change)

    def instances_of_job(self, job_id: str) -> list[InstanceDoc]:
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self.client.collection(INSTANCES).where(filter=FieldFilter("job_id", "==", job_id))
        return [InstanceDoc.model_validate(snap.to_dict()) for snap in query.stream()]

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
        """CLOSED/STOPPED instances: kept, restartable, and watched by the reaper."""
        return self._list(INSTANCES, InstanceDoc, "substatus", ["STOPPED"], limit, after, user)

    def list_instance_names(
        self, statuses: Iterable[str], limit: int = 1000, after: str | None = None
    ) -> list[str]:
        return self._keys(INSTANCES, "status", statuses, limit, after)

    def stopped_instance_names(self, limit: int = 1000, after: str | None = None) -> list[str]:
        return self._keys(INSTANCES, "substatus", ["STOPPED"], limit, after)

    # -- queue ------------------------------------------------------------

    def put_queue(self, entry: QueueEntry) -> None:
        """Enqueue or replace the job's entry (one per job: the job id is the key)."""
        self.client.collection(QUEUE).document(entry.job_id).set(to_firestore(entry))

    def get_queue(self, job_id: str) -> QueueEntry | None:
        return self._get(QUEUE, job_id, QueueEntry)

    def due_queue(self, now: datetime, limit: int = 50) -> list[QueueEntry]:
        """Entries whose ``not_before`` has passed, oldest first."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = (
            self.client.collection(QUEUE)
            .where(filter=FieldFilter("not_before", "<=", now))
            .order_by("not_before")
            .limit(limit)
        )
        return [QueueEntry.model_validate(snap.to_dict()) for snap in query.stream()]

    def delete_queue(self, job_id: str) -> None:
        self.client.collection(QUEUE).document(job_id).delete()

    def queue_of_user(self, user: str) -> list[QueueEntry]:
        """The user's queue entries, oldest first (one equality filter: no
        composite index needed)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self.client.collection(QUEUE).where(filter=FieldFilter("user", "==", user))
        entries = [QueueEntry.model_validate(snap.to_dict()) for snap in query.stream()]
        return sorted(entries, key=lambda entry: entry.enqueued_at)

    # -- users --------------------------------------------------------------

    def get_user(self, user: str) -> UserDoc | None:
        return self._get(USERS, user, UserDoc)

    def update_user(self, user: str, change: Callable[[UserDoc], UserDoc]) -> UserDoc:
        """Apply ``change`` to ``users/{user}``, creating it on first use."""
        updated = self._update(USERS, user, UserDoc, change)
        if updated is None:
            self._create(USERS, user, UserDoc(user=user))
            updated = self._update(USERS, user, UserDoc, change)
        assert updated is not None  # created just above; users are never deleted
        return updated

    def get_users(self, users: Iterable[str]) -> dict[str, UserDoc]:
        return self._get_all(USERS, users, UserDoc)

    def list_users(self, limit: int = 1000, after: str | None = None) -> list[UserDoc]:
        return self._list(USERS, UserDoc, "user", None, limit, after)

    def list_user_names(self, limit: int = 1000, after: str | None = None) -> list[str]:
        return self._keys(USERS, "user", None, limit, after)

    # -- machines -------------------------------------------------------------

    def seed_machines(self, catalog: dict[str, Machine]) -> None:
        """Write the catalog into ``machines/`` (idempotent: same ids, same fields)."""
        for machine in catalog.values():
            self.client.collection(MACHINES).document(machine.machine_id).set(asdict(machine))

    def get_machine(self, machine_id: str) -> Machine | None:
        snap = self.client.collection(MACHINES).document(machine_id).get()
        if not snap.exists:
            return None
        fields = snap.to_dict() or {}
        # Only the catalog's fields: the document may gain console-only ones.
        return Machine(**{field.name: fields[field.name] for field in dataclass_fields(Machine)})

    def record_request(self, machine_id: str, ok: bool, now: datetime) -> None:
        """Count one VM request of ``machine_id`` (Spot or ``.od``) in its hour.

        Server-side increments on an hourly document: concurrent placements
        never contend, and "recent" is a sum over the last hours.
        """
        from google.cloud import firestore

        hour = self._hours(machine_id).document(now.strftime("%Y%m%d%H"))
        hour.set(
            {
                "machine_id": machine_id,
                "hour": now.replace(minute=0, second=0, microsecond=0),
                "requests": firestore.Increment(1),
                "successes": firestore.Increment(1 if ok else 0),
            },
            merge=True,
        )

    def availability(self, machine_id: str, since: datetime) -> tuple[int, int]:
        """(requests, successes) of ``machine_id`` since ``since``."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self._hours(machine_id).where(filter=FieldFilter("hour", ">=", since))
        requests = successes = 0
        for snap in query.stream():
            data = snap.to_dict() or {}
            requests += int(data.get("requests", 0))
            successes += int(data.get("successes", 0))
        return requests, successes

    def _hours(self, machine_id: str) -> Any:
        # Spot and on-demand requests of one machine are counted apart.
        return self.client.collection(MACHINES).document(machine_id).collection("hours")

    # -- rejected messages ------------------------------------------------

    def record_rejection(self, rejection: Rejection) -> bool:
        return self._create(REJECTED, rejection.message_id, rejection)

    def get_rejection(self, message_id: str) -> Rejection | None:
        return self._get(REJECTED, message_id, Rejection)

    def recent_rejections(self, limit: int = 20) -> list[Rejection]:
        """The newest first."""
        from google.cloud import firestore

        query = self.client.collection(REJECTED).order_by(
            "at", direction=firestore.Query.DESCENDING
        )
        return [Rejection.model_validate(snap.to_dict()) for snap in query.limit(limit).stream()]


def _recent_filters(limit: int, statuses: Iterable[str] | None) -> set[str] | None:
    """``recent_jobs``' statuses as a set (None: any), after checking its arguments."""
    if limit < 1:
        raise ValueError(f"limit: {limit}; at least 1")
    wanted = None if statuses is None else {str(status) for status in statuses}
    if wanted is not None and not wanted:
        raise ValueError("statuses: empty; give at least one status, or None for any")
    return wanted
