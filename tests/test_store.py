"""The Firestore repository against the real Firestore emulator."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.firestore_store import FirestoreStore
from shared.domain.documents import EpochDoc, JobDoc, QueueEntry, Rejection
from shared.domain.lifecycle import new_job
from shared.domain.spec import JobSpec
from shared.domain.states import JobStatus, JobSubstatus
from shared.domain.transitions import move_job

pytestmark = pytest.mark.emulators
T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def a_job(job_id: str = "job1") -> JobDoc:
    spec = JobSpec(user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp", epochs=3)
    return new_job(spec, job_id, "m1", T0)


def test_create_is_once_only_and_round_trips(project: str) -> None:
    store = FirestoreStore(project)
    job = a_job()
    assert store.create_job(job) is True
    assert store.create_job(job.model_copy(update={"description": "second"})) is False
    stored = store.get_job("job1")
    assert stored == job
    assert stored is not None and stored.status == JobStatus.QUEUING
    raw = store.client.collection("jobs").document("job1").get().to_dict() or {}
    # What a person reads in the console: plain words and real timestamps.
    assert raw["status"] == "QUEUING" and raw["progress"] == "0/3"
    assert isinstance(raw["created_at"], datetime)


def test_guarded_update_applies_every_concurrent_change(project: str) -> None:
    store = FirestoreStore(project)
    store.create_job(a_job())
    workers = 8

    def bump(step: int) -> None:
        store.update_job(
            "job1",
            lambda job: job.model_copy(update={"metrics": {**job.metrics, f"w{step}": 1.0}}),
        )

    threads = [threading.Thread(target=bump, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = store.get_job("job1")
    assert stored is not None and len(stored.metrics) == workers  # no lost update


def test_update_of_a_missing_job_is_none_and_no_change_writes_nothing(project: str) -> None:
    store = FirestoreStore(project)
    assert store.update_job("nope", lambda job: job) is None
    store.create_job(a_job())
    before = store.client.collection("jobs").document("job1").get().update_time
    store.update_job("job1", lambda job: move_job(job, JobSubstatus.REQUESTING_SERVER, T0))
    assert store.client.collection("jobs").document("job1").get().update_time == before


def test_queue_is_drained_in_not_before_order(project: str) -> None:
    store = FirestoreStore(project)
    for name, delay in (("late", 30), ("early", -30), ("future", 3600), ("middle", 0)):
        store.put_queue(
            QueueEntry(
                job_id=name,
                reason="no-capacity",
                attempt=1,
                not_before=T0 + timedelta(seconds=delay),
                enqueued_at=T0,
            )
        )
    due = store.due_queue(T0 + timedelta(seconds=60))
    assert [entry.job_id for entry in due] == ["early", "middle", "late"]
    store.delete_queue("early")
    assert store.get_queue("early") is None


def test_epochs_are_keyed_by_number(project: str) -> None:
    store = FirestoreStore(project)
    store.create_job(a_job())
    for epoch in (2, 1, 2):
        store.put_epoch(
            "job1",
            EpochDoc(
                epoch=epoch,
                epochs=3,
                attempt=1,
                step=epoch * 10,
                metrics={"loss": 1.0 / epoch},
                instance="vm",
                at=T0,
            ),
        )
    assert [e.epoch for e in store.list_epochs("job1")] == [1, 2]


def test_list_jobs_by_status_and_rejections(project: str) -> None:
    store = FirestoreStore(project)
    store.create_job(a_job("a"))
    store.create_job(move_job(a_job("b"), JobSubstatus.CANCELED, T0))
    assert [j.job_id for j in store.list_jobs([JobStatus.CANCELED])] == ["b"]
    assert len(store.list_jobs()) == 2
    rejection = Rejection(message_id="42", reason="user: Field required", payload="{}", at=T0)
    assert store.record_rejection(rejection) is True
    assert store.record_rejection(rejection) is False
    assert store.get_rejection("42") == rejection
    later = rejection.model_copy(update={"message_id": "43", "at": T0 + timedelta(seconds=1)})
    store.record_rejection(later)
    assert [r.message_id for r in store.recent_rejections()] == ["43", "42"]
    assert [r.message_id for r in store.recent_rejections(limit=1)] == ["43"]
