"""Live job documents through Firestore listeners (``on_snapshot``), for
``spotline watch``: the server pushes each change, nothing polls.

The listeners' callbacks run on the client library's threads; they only put
what changed on a queue, which the caller reads at its own pace.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spotline.shared.adapters.firestore_store import EPOCHS, JOBS, FirestoreStore
from spotline.shared.domain.documents import EpochDoc, JobDoc, epoch_order
from spotline.shared.domain.states import JobStatus


@dataclass(frozen=True)
class JobChanged:
    job: JobDoc


@dataclass(frozen=True)
class EpochsChanged:
    job_id: str
    epochs: list[EpochDoc]


Change = JobChanged | EpochsChanged


class JobFeed:
    """Changes of the jobs ``job_ids`` (their documents and epochs), or, with
    none given, of every active job (documents only). A context manager:
    leaving it stops every listener."""

    def __init__(self, store: FirestoreStore, job_ids: Sequence[str] = ()) -> None:
        self.store = store
        self.job_ids = list(job_ids)
        self.changes: queue.Queue[Change] = queue.Queue()
        self._watches: list[Any] = []

    def __enter__(self) -> JobFeed:
        from google.cloud.firestore_v1.base_query import FieldFilter

        jobs = self.store.client.collection(JOBS)
        if not self.job_ids:
            active = [str(s) for s in JobStatus.active()]
            query = jobs.where(filter=FieldFilter("status", "in", active))
            self._watches.append(query.on_snapshot(self._on_jobs))
        for job_id in self.job_ids:
            self._watches.append(jobs.document(job_id).on_snapshot(self._on_jobs))
            epochs = jobs.document(job_id).collection(EPOCHS)
            self._watches.append(epochs.on_snapshot(self._epochs_of(job_id)))
        return self

    def __exit__(self, *_: object) -> None:
        for watch in self._watches:
            watch.unsubscribe()
        self._watches.clear()

    def next(self, timeout_s: float) -> Change | None:
        """The next change, or None when none came within ``timeout_s``."""
        try:
            return self.changes.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def _on_jobs(self, snapshots: list[Any], *_: Any) -> None:
        for snapshot in snapshots:
            if snapshot.exists:
                self.changes.put(JobChanged(JobDoc.model_validate(snapshot.to_dict())))

    def _epochs_of(self, job_id: str) -> Any:
        def on_epochs(snapshots: list[Any], *_: Any) -> None:
            epochs = [EpochDoc.model_validate(s.to_dict()) for s in snapshots]
            self.changes.put(EpochsChanged(job_id, sorted(epochs, key=epoch_order)))

        return on_epochs
