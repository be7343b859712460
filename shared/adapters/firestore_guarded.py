"""Firestore's guarded reads and writes, under every collection of the store.

``GuardedDocuments`` holds the client and the primitives that
``FirestoreStore`` (``spotline.shared.adapters.firestore_store``) builds each
collection's calls from: ``_create`` (fails when the document exists),
``_update`` (read, apply a pure change, write with a last-update-time
precondition; again on contention), ``_update_kept`` (the same from the
version this store wrote last, with no read: ``firestore_versions``), batch
gets, and paged listings. They are apart from the collections so that each
module stays small; no transaction is used (the emulator can stall contended
ones for tens of seconds, and a transaction may run its function again).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from spotline.shared.adapters.firestore_diff import changed_fields
from spotline.shared.adapters.firestore_listing import keys_of, page_query
from spotline.shared.adapters.firestore_versions import WrittenVersions
from spotline.shared.domain.documents import to_firestore
from spotline.shared.domain.errors import TransientError
from spotline.shared.retries import CONTENTION, Backoff, retried

if TYPE_CHECKING:
    from google.cloud import firestore

log = logging.getLogger(__name__)

Doc = TypeVar("Doc", bound=BaseModel)
JOBS, INSTANCES, QUEUE, REJECTED, EPOCHS, USERS, MACHINES = (
    "jobs",
    "instances",
    "queue",
    "rejected",
    "epochs",
    "users",
    "machines",
)
_GET_ALL = 300  # documents per batch get (a request's size stays small)
_VERSIONED = frozenset({JOBS})  # see firestore_versions: why only jobs


class GuardedDocuments:
    """The Firestore client of ``project`` and the guarded primitives."""

    def __init__(
        self,
        project: str,
        client: firestore.Client | None = None,
        contention: Backoff = CONTENTION,
    ) -> None:
        """``contention``: how a guarded write that lost a race is tried again."""
        self.project = project
        self._contention = contention
        self._client = client
        self._versions = WrittenVersions()
        self._thread = threading.local()

    @cached_property
    def client(self) -> firestore.Client:
        if self._client is None:
            # Imported here: google.cloud.firestore costs ~0.5 s, and handlers that
            # never touch Firestore should not pay it at cold start.
            from google.cloud import firestore

            self._client = firestore.Client(project=self.project)
        return self._client

    # -- the guarded primitives -------------------------------------------

    def _create(self, collection: str, key: str, doc: BaseModel) -> bool:
        from google.api_core.exceptions import AlreadyExists

        data = to_firestore(doc)
        try:
            result = self.client.collection(collection).document(key).create(data)
        except AlreadyExists:
            return False
        if collection in _VERSIONED:
            self._versions.put(collection, key, data, result.update_time)
        return True

    def _get(self, collection: str, key: str, model: type[Doc]) -> Doc | None:
        snap = self.client.collection(collection).document(key).get()
        return model.model_validate(snap.to_dict()) if snap.exists else None

    def _get_all(self, collection: str, keys: Iterable[str], model: type[Doc]) -> dict[str, Doc]:
        """One BatchGetDocuments per ``_GET_ALL`` keys, instead of a round trip each."""
        wanted = sorted(set(keys))
        found: dict[str, Doc] = {}
        for first in range(0, len(wanted), _GET_ALL):
            refs = [
                self.client.collection(collection).document(k)
                for k in wanted[first : first + _GET_ALL]
            ]
            for snap in self.client.get_all(refs):
                if snap.exists:
                    found[snap.id] = model.model_validate(snap.to_dict())
        return found

    def _update(
        self, collection: str, key: str, model: type[Doc], change: Callable[[Doc], Doc]
    ) -> Doc | None:
        from google.api_core.exceptions import FailedPrecondition

        ref = self.client.collection(collection).document(key)
        written = self._update_kept(ref, collection, key, model, change)
        if written is not None:
            return written

        def read_change_write() -> Doc | None:
            snap = ref.get()
            if not snap.exists:
                self._versions.drop(collection, key)
                return None
            current = model.model_validate(snap.to_dict())
            changed = change(current)
            if changed is current or changed == current:
                return current
            guard = self.client.write_option(last_update_time=snap.update_time)
            after = to_firestore(changed)
            fields = changed_fields(to_firestore(current), after)
            if not fields:  # unequal models, equal documents: nothing to write
                return current
            result = ref.update(fields, option=guard)  # FailedPrecondition: changed under us
            if collection in _VERSIONED:
                self._versions.put(collection, key, after, result.update_time)
            return changed

        def lost_race(exc: Exception) -> bool:
            if not isinstance(exc, FailedPrecondition):
                return False
            log.info("%s/%s changed under us; re-reading", collection, key)
            return True

        return retried(
            read_change_write,
            lost_race,
            self._contention,
            give_up=lambda _: TransientError(
                f"{collection}/{key}: too much write contention, try again"
            ),
        )

    def _update_kept(
        self, ref: Any, collection: str, key: str, model: type[Doc], change: Callable[[Doc], Doc]
    ) -> Doc | None:
        """``change`` written on the version of the document this store wrote
        last, guarded by that version's update time, with no read
        (``firestore_versions``). None: read it first (none kept, someone
        else wrote since, or the change would write nothing)."""
        from google.api_core.exceptions import FailedPrecondition, NotFound

        kept = self._versions.get(collection, key)
        if kept is None:
            return None
        data, update_time = kept
        self._thread.unread = self.unread_changes() + 1
        # A fresh model from the kept fields: a change never shares its input.
        current = model.model_validate(data)
        try:
            changed = change(current)
        except Exception:  # a refusal (a stale event, a forged token) of a
            return None  # version that may be stale: read, and ask again
        if changed is current or changed == current:
            return None  # nothing to write, says a version that may be stale
        after = to_firestore(changed)
        fields = changed_fields(data, after)
        if not fields:
            return None
        guard = self.client.write_option(last_update_time=update_time)
        try:
            result = ref.update(fields, option=guard)
        except (FailedPrecondition, NotFound):
            self._versions.drop(collection, key)
            return None
        self._versions.put(collection, key, after, result.update_time)
        return changed

    def unread_changes(self) -> int:
        """How many runs of an update's change on this thread started from a
        kept version rather than a read (``CountingStore`` bills no read for them)."""
        return int(getattr(self._thread, "unread", 0))

    def _list(
        self,
        collection: str,
        model: type[Doc],
        field: str,
        values: Iterable[str] | None,
        limit: int,
        after: str | None,
        user: str | None = None,
    ) -> list[Doc]:
        query = page_query(self.client, collection, field, values, limit, after, user)
        return [model.model_validate(snap.to_dict()) for snap in query.stream()]

    def _keys(
        self,
        collection: str,
        field: str,
        values: Iterable[str] | None,
        limit: int,
        after: str | None,
    ) -> list[str]:
        return keys_of(page_query(self.client, collection, field, values, limit, after))
