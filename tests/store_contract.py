"""The store port's contract (shared/ports/store.py), one suite for both adapters.

Its tests run against ``InMemoryStore`` (tests/unit/test_memory_store_contract.py)
and against ``FirestoreStore`` on the real Firestore emulator
(tests/emulators/test_firestore_store_contract.py, skipped, loudly, where the
Google Cloud CLI is missing: see conftest.py), so the in-memory store that fast
tests use keeps what Firestore does. Each of those files imports the tests and
gives the ``backend`` fixture.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import pytest

from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.documents import (
    EpochDoc,
    InstanceDoc,
    JobDoc,
    QueueEntry,
    Rejection,
    UserDoc,
)
from spotline.shared.domain.errors import TransientError
from spotline.shared.domain.job_events import without_published
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus, JobSubstatus
from spotline.shared.domain.transitions import move_job
from spotline.shared.domain.vms import Provisioning
from spotline.shared.ports.store import Store

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@dataclass
class Backend:
    """A store under test, and how to tell that a document was written."""

    store: Store
    # A token that changes with every write of collection/key (Firestore's
    # update time; the in-memory version).
    stamp: Callable[[str, str], object]


def memory_backend() -> Backend:
    store = InMemoryStore()
    return Backend(store, store.version)


def firestore_backend(project: str) -> Backend:
    store = FirestoreStore(project)

    def stamp(collection: str, key: str) -> object:
        return store.client.collection(collection).document(key).get().update_time

    return Backend(store, stamp)


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.store


def a_job(job_id: str = "job1", user: str = "alice") -> JobDoc:
    spec = JobSpec(user=user, machine_ids=["g2-standard-4"], trainer="digits_mlp", epochs=3)
    return new_job(spec, job_id, "m1", T0)


def an_instance(
    name: str,
    job_id: str = "job1",
    status: InstanceStatus = InstanceStatus.EXECUTING,
    substatus: InstanceSubstatus | None = None,
) -> InstanceDoc:
    return InstanceDoc(
        name=name,
        job_id=job_id,
        user="alice",
        attempt=1,
        machine_id="g2-standard-4",
        machine_type="g2-standard-4",
        zone="us-central1-a",
        provisioning=Provisioning.SPOT,
        status=status,
        substatus=substatus,
        created_at=T0,
        updated_at=T0,
    )


def an_entry(
    job_id: str, not_before_s: float = 0, enqueued_s: float = 0, **kw: object
) -> QueueEntry:
    return QueueEntry.model_validate(
        {
            "job_id": job_id,
            "reason": "no-capacity",
            "attempt": 1,
            "not_before": T0 + timedelta(seconds=not_before_s),
            "enqueued_at": T0 + timedelta(seconds=enqueued_s),
            **kw,
        }
    )


def a_rejection(message_id: str, at_s: float) -> Rejection:
    return Rejection(
        message_id=message_id,
        reason="user: Field required",
        payload="{}",
        at=T0 + timedelta(seconds=at_s),
    )


# -- create, get, update ------------------------------------------------------


def test_create_is_once_only_and_round_trips(store: Store) -> None:
    job, instance, rejection = a_job(), an_instance("vm1"), a_rejection("42", 0)
    assert store.get_job("job1") is None
    assert store.create_job(job) is True
    assert store.create_job(job.model_copy(update={"description": "second"})) is False
    assert store.get_job("job1") == job  # the first one stays
    assert store.create_instance(instance) is True
    assert store.create_instance(instance.model_copy(update={"zone": "elsewhere"})) is False
    assert store.get_instance("vm1") == instance
    assert store.get_instance("vm2") is None
    assert store.record_rejection(rejection) is True
    assert store.record_rejection(rejection.model_copy(update={"reason": "again"})) is False
    assert store.get_rejection("42") == rejection
    assert store.get_rejection("43") is None


def test_stored_documents_are_copies(store: Store) -> None:
    job = a_job()
    store.create_job(job)
    job.metrics["loss"] = 1.0  # the caller's model, changed after the create
    read = store.get_job("job1")
    assert read is not None and read.metrics == {}
    read.metrics["loss"] = 2.0
    read.history.clear()
    again = store.get_job("job1")
    assert again is not None and again.metrics == {} and len(again.history) == 1
    updated = store.update_job("job1", lambda j: j.model_copy(update={"step": 5}))
    assert updated is not None and updated.step == 5
    updated.metrics["loss"] = 3.0
    assert store.get_job("job1") == again.model_copy(update={"step": 5})


def test_update_of_a_missing_document_is_none_and_creates_nothing(store: Store) -> None:
    assert store.update_job("nope", lambda job: job.model_copy(update={"step": 1})) is None
    assert store.get_job("nope") is None
    assert store.update_instance("nope", lambda i: i.model_copy(update={"zone": "z"})) is None
    assert store.get_instance("nope") is None


def test_a_change_that_changes_nothing_writes_nothing(backend: Backend) -> None:
    store = backend.store
    store.create_job(a_job())
    before = backend.stamp("jobs", "job1")
    # The same object, then an equal one, then a transition to where it is.
    assert store.update_job("job1", lambda job: job) == a_job()
    assert store.update_job("job1", lambda job: job.model_copy(deep=True)) == a_job()
    same = store.update_job("job1", lambda job: move_job(job, JobSubstatus.REQUESTING_SERVER, T0))
    assert same == a_job()
    assert backend.stamp("jobs", "job1") == before
    moved = store.update_job("job1", lambda job: move_job(job, JobSubstatus.CANCELED, T0))
    assert moved is not None and moved.status == JobStatus.CANCELED
    assert store.get_job("job1") == moved
    assert backend.stamp("jobs", "job1") != before


def _bump_concurrently(threads: int, bumps: int, update: Callable[[], object]) -> None:
    """``threads`` writers, each updating ``bumps`` times; a TransientError (too
    much contention, nothing written) is retried, as Pub/Sub would redeliver."""
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(bumps):
                while True:
                    try:
                        update()
                        break
                    except TransientError:
                        continue
        except BaseException as err:  # reported below: a thread's exception is lost
            errors.append(err)

    workers = [threading.Thread(target=writer) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []


def test_concurrent_guarded_updates_lose_nothing(store: Store) -> None:
    store.create_job(a_job())
    runs = [0]
    gate = threading.Lock()

    def increment(job: JobDoc) -> JobDoc:
        with gate:
            runs[0] += 1
        # A read-modify-write that takes a while, as a handler's decision does:
        # without the guard, writers racing here lose each other's increments.
        threading.Event().wait(0.001)
        return job.model_copy(update={"step": job.step + 1})

    _bump_concurrently(8, 25, lambda: store.update_job("job1", increment))
    stored = store.get_job("job1")
    assert stored is not None and stored.step == 8 * 25  # no lost update
    assert runs[0] > 8 * 25  # the writers did race: changes on stale reads re-ran


def test_users_are_created_on_first_update_even_by_racing_writers(store: Store) -> None:
    assert store.get_user("alice") is None
    names = iter(range(8))
    gate = threading.Lock()

    def take_slot() -> None:
        with gate:
            job = f"job{next(names)}"
        store.update_user(
            "alice",
            lambda user: user.model_copy(update={"active_jobs": [*user.active_jobs, job]}),
        )

    _bump_concurrently(8, 1, take_slot)
    user = store.get_user("alice")
    assert user is not None and sorted(user.active_jobs) == [f"job{n}" for n in range(8)]
    # An existing user, and a change that changes nothing: returned as stored.
    assert store.update_user("alice", lambda u: u) == user
    bob = store.update_user("bob", lambda u: u)
    assert bob == UserDoc(user="bob") == store.get_user("bob")
    assert [u.user for u in store.list_users()] == ["alice", "bob"]
    assert [u.user for u in store.list_users(limit=1)] == ["alice"]


def test_timestamps_come_back_in_utc(store: Store) -> None:
    plus_two = timezone(timedelta(hours=2))
    at = datetime(2026, 11, 21, 14, 0, 0, 123456, tzinfo=plus_two)
    store.put_queue(an_entry("j", not_before=at, enqueued_at=at.replace(tzinfo=None)))
    entry = store.get_queue("j")
    assert entry is not None
    assert entry.not_before == at and entry.not_before.utcoffset() == timedelta(0)
    # A naive timestamp is taken as UTC.
    assert entry.enqueued_at == at.replace(tzinfo=UTC)


# -- lists: filters, limits, orders -------------------------------------------


def test_lists_filter_by_status_in_key_order_up_to_a_limit(store: Store) -> None:
    for job_id in ("c", "a", "d", "b"):  # created out of key order
        job = a_job(job_id)
        store.create_job(move_job(job, JobSubstatus.CANCELED, T0) if job_id in "bd" else job)
    assert [j.job_id for j in store.list_jobs()] == ["a", "b", "c", "d"]
    assert [j.job_id for j in store.list_jobs(limit=3)] == ["a", "b", "c"]
    assert [j.job_id for j in store.list_jobs([JobStatus.CANCELED])] == ["b", "d"]
    assert [j.job_id for j in store.list_jobs([JobStatus.CANCELED], limit=1)] == ["b"]
    both = [JobStatus.QUEUING, JobStatus.CANCELED]
    assert [j.job_id for j in store.list_jobs(both)] == ["a", "b", "c", "d"]
    assert store.list_jobs([JobStatus.TRAINING]) == []

    executing, closed = InstanceStatus.EXECUTING, InstanceStatus.CLOSED
    store.create_instance(an_instance("vm3", "job2", closed, InstanceSubstatus.STOPPED))
    store.create_instance(an_instance("vm1", "job1", executing))
    store.create_instance(an_instance("vm4", "job1", closed, InstanceSubstatus.TERMINATED))
    store.create_instance(an_instance("vm2", "job1", closed, InstanceSubstatus.STOPPED))
    assert [i.name for i in store.list_instances()] == ["vm1", "vm2", "vm3", "vm4"]
    assert [i.name for i in store.list_instances(InstanceStatus.live())] == ["vm1"]
    assert [i.name for i in store.list_instances([closed], limit=2)] == ["vm2", "vm3"]
    assert [i.name for i in store.stopped_instances()] == ["vm2", "vm3"]
    assert [i.name for i in store.stopped_instances(limit=1)] == ["vm2"]
    assert [i.name for i in store.instances_of_job("job1")] == ["vm1", "vm2", "vm4"]
    assert store.instances_of_job("job9") == []


def test_unpublished_jobs_are_those_with_events_in_their_outbox(store: Store) -> None:
    for job_id in ("c", "a", "b"):  # each new job holds its "submitted" event
        store.create_job(a_job(job_id))
    assert [j.job_id for j in store.unpublished_jobs()] == ["a", "b", "c"]
    assert [j.job_id for j in store.unpublished_jobs(limit=2)] == ["a", "b"]
    store.update_job("b", lambda job: without_published(job, {1}))
    assert [j.job_id for j in store.unpublished_jobs()] == ["a", "c"]
    canceled = store.update_job("b", lambda job: move_job(job, JobSubstatus.CANCELED, T0))
    assert canceled is not None and [e.event_id for e in canceled.pending_events] == ["b/2"]
    assert [j.job_id for j in store.unpublished_jobs()] == ["a", "b", "c"]


def test_a_status_filter_holds_one_to_thirty_values(store: Store) -> None:
    store.create_job(a_job())
    with pytest.raises(ValueError):
        store.list_jobs([])
    with pytest.raises(ValueError):
        store.list_instances([f"S{n}" for n in range(31)])
    assert store.list_jobs([f"S{n}" for n in range(29)] + ["QUEUING"]) == [a_job()]


def test_recent_jobs_are_newest_first_filtered_by_user_and_status(store: Store) -> None:
    """`spotline status`: the newest jobs, not the first ids in key order."""
    made = [  # (job id, user, seconds after T0, canceled)
        ("a", "alice", 30, False),
        ("b", "bob", 10, True),
        ("c", "alice", 50, True),
        ("d", "bob", 40, False),
        ("e", "alice", 0, False),
        ("f", "alice", 40, False),  # the same created_at as d
    ]
    for job_id, user, after_s, canceled in made:
        job = a_job(job_id, user).model_copy(update={"created_at": T0 + timedelta(seconds=after_s)})
        store.create_job(move_job(job, JobSubstatus.CANCELED, T0) if canceled else job)

    def ids(**kw: object) -> list[str]:
        return [j.job_id for j in store.recent_jobs(**kw)]  # type: ignore[arg-type]

    # A tie on created_at goes in descending key order, as Firestore breaks it.
    assert ids() == ["c", "f", "d", "a", "b", "e"]
    assert ids(limit=2) == ["c", "f"]
    assert ids(user="alice") == ["c", "f", "a", "e"]
    assert ids(user="alice", limit=2) == ["c", "f"]
    assert ids(statuses=[JobStatus.QUEUING]) == ["f", "d", "a", "e"]
    assert ids(statuses=[JobStatus.QUEUING], user="bob") == ["d"]
    assert ids(statuses=[JobStatus.QUEUING], user="alice", limit=3) == ["f", "a", "e"]
    assert ids(user="carol") == []
    with pytest.raises(ValueError, match="limit"):
        store.recent_jobs(limit=0)
    with pytest.raises(ValueError, match="status"):
        store.recent_jobs(statuses=[])


# -- the queue -------------------------------------------------------------


def test_queue_put_replaces_and_drains_in_not_before_order(store: Store) -> None:
    for name, delay in (("late", 30), ("early", -30), ("future", 3600), ("middle", 0), ("now", 60)):
        store.put_queue(an_entry(name, not_before_s=delay))
    now = T0 + timedelta(seconds=60)
    assert [e.job_id for e in store.due_queue(now)] == ["early", "middle", "late", "now"]
    assert [e.job_id for e in store.due_queue(now, limit=2)] == ["early", "middle"]
    # One entry per job: putting it again replaces it.
    store.put_queue(an_entry("early", not_before_s=45, tries=2, last_error="no capacity"))
    assert [e.job_id for e in store.due_queue(now)] == ["middle", "late", "early", "now"]
    assert store.get_queue("early") == an_entry(
        "early", not_before_s=45, tries=2, last_error="no capacity"
    )
    store.delete_queue("early")
    assert store.get_queue("early") is None
    store.delete_queue("early")  # a missing entry: nothing to do
    assert [e.job_id for e in store.due_queue(now)] == ["middle", "late", "now"]


def test_queue_of_user_is_oldest_first(store: Store) -> None:
    store.put_queue(an_entry("b2", enqueued_s=20, user="bob"))
    store.put_queue(an_entry("a3", enqueued_s=30, user="alice"))
    store.put_queue(an_entry("a1", enqueued_s=10, user="alice"))
    store.put_queue(an_entry("a0", enqueued_s=30, user="alice"))  # a tie with a3: key order
    store.put_queue(an_entry("nobody", enqueued_s=0))
    assert [e.job_id for e in store.queue_of_user("alice")] == ["a1", "a0", "a3"]
    assert [e.job_id for e in store.queue_of_user("bob")] == ["b2"]
    assert store.queue_of_user("carol") == []


# -- epochs, availability, rejections, machines ------------------------------


def test_epochs_are_keyed_by_attempt_and_number_and_listed_in_order(store: Store) -> None:
    store.create_job(a_job())

    def epoch(n: int, step: int, attempt: int = 1) -> EpochDoc:
        return EpochDoc(
            epoch=n,
            epochs=12,
            attempt=attempt,
            step=step,
            metrics={"loss": 1.0 / n},
            instance=f"vm-a{attempt}",
            at=T0,
        )

    for n in (10, 2, 1, 2):
        store.put_epoch("job1", epoch(n, n * 10))
    store.put_epoch("job1", epoch(2, 99))  # a redelivery overwrites the epoch
    # The next attempt, resumed from a save in epoch 2, records it again: both kept.
    store.put_epoch("job1", epoch(3, 130, attempt=2))
    store.put_epoch("job1", epoch(2, 120, attempt=2))
    store.put_epoch("job2", epoch(1, 1))
    assert store.list_epochs("job1") == [
        epoch(1, 10),
        epoch(2, 99),
        epoch(10, 100),
        epoch(2, 120, attempt=2),
        epoch(3, 130, attempt=2),
    ]
    assert store.list_epochs("job2") == [epoch(1, 1)]
    assert store.list_epochs("job3") == []


def test_availability_sums_the_hours_since(store: Store) -> None:
    gpu = "g2-standard-4"
    store.record_request(gpu, True, T0 - timedelta(hours=2, minutes=-5))  # 10:05
    store.record_request(gpu, False, T0 - timedelta(minutes=30))  # 11:30
    store.record_request(gpu, True, T0 - timedelta(minutes=10))  # 11:50
    store.record_request(gpu, False, T0 + timedelta(minutes=1))  # 12:01
    store.record_request(f"{gpu}.od", True, T0)  # on demand is counted apart
    assert store.availability(gpu, T0 - timedelta(hours=3)) == (4, 2)
    assert store.availability(gpu, T0 - timedelta(hours=1)) == (3, 1)  # hours 11 and 12
    # An hour counts when it starts at or after ``since``: 11:00 < 11:30.
    assert store.availability(gpu, T0 - timedelta(minutes=30)) == (1, 0)
    assert store.availability(f"{gpu}.od", T0 - timedelta(hours=3)) == (1, 1)
    assert store.availability("a2-highgpu-1g", T0 - timedelta(hours=3)) == (0, 0)

    # Concurrent counts of one hour are never lost.
    def count() -> None:
        store.record_request("n1-standard-8-t4", True, T0)

    _bump_concurrently(8, 5, count)
    assert store.availability("n1-standard-8-t4", T0) == (40, 40)


def test_rejections_newest_first(store: Store) -> None:
    for message_id, at_s in (("41", 0), ("43", 2), ("40", 1), ("44", 2)):
        store.record_rejection(a_rejection(message_id, at_s))
    # A tie on ``at`` goes in descending key order, as Firestore breaks it.
    assert [r.message_id for r in store.recent_rejections()] == ["44", "43", "40", "41"]
    assert [r.message_id for r in store.recent_rejections(limit=2)] == ["44", "43"]


def test_machines_are_seeded_idempotently(store: Store) -> None:
    catalog = load_catalog()
    store.seed_machines(catalog)
    store.seed_machines(catalog)
    for machine_id, machine in catalog.items():
        assert store.get_machine(machine_id) == machine
    assert store.get_machine("no-such-machine") is None


# -- what Firestore refuses, the in-memory store refuses too --------------------


@pytest.mark.parametrize(
    "epoch",
    [
        {"metrics": {"__loss__": 1.0}},  # a reserved field name
        {"metrics": {"": 1.0}},  # an empty one
        {"step": 2**63},  # past int64
    ],
    ids=["reserved-key", "empty-key", "int64"],
)
def test_a_value_firestore_refuses_is_refused(store: Store, epoch: dict[str, object]) -> None:
    doc = EpochDoc.model_validate(
        {"epoch": 1, "epochs": 3, "attempt": 1, "step": 0, "instance": "i", "at": T0, **epoch}
    )
    with pytest.raises(Exception):  # noqa: B017 - ValueError or InvalidArgument
        store.put_epoch("job1", doc)
    assert store.list_epochs("job1") == []


def test_a_document_id_with_a_slash_is_refused(store: Store) -> None:
    with pytest.raises(ValueError):
        store.create_instance(an_instance("sl-a/b"))
    with pytest.raises(ValueError):
        store.get_job("a/b")
    assert store.list_instances() == []


def test_lists_page_on_from_the_last_key(store: Store) -> None:
    for job_id in ("e", "c", "a", "d", "b"):
        job = a_job(job_id)
        store.create_job(move_job(job, JobSubstatus.CANCELED, T0) if job_id == "c" else job)
    active = [JobStatus.QUEUING]
    assert [j.job_id for j in store.list_jobs(active, limit=2)] == ["a", "b"]
    assert [j.job_id for j in store.list_jobs(active, limit=2, after="b")] == ["d", "e"]
    assert store.list_jobs(active, limit=2, after="e") == []
    # The key need not exist, nor match the filter.
    assert [j.job_id for j in store.list_jobs(active, after="bb")] == ["d", "e"]
    assert [j.job_id for j in store.list_jobs(after="c")] == ["d", "e"]
    closed, stopped = InstanceStatus.CLOSED, InstanceSubstatus.STOPPED
    for name in ("vm2", "vm1", "vm3"):
        store.create_instance(an_instance(name, "a", closed, stopped))
    assert [i.name for i in store.list_instances(limit=1, after="vm1")] == ["vm2"]
    assert [i.name for i in store.stopped_instances(limit=5, after="vm2")] == ["vm3"]
    for name in ("bob", "alice", "carol"):
        store.update_user(name, lambda u: u)
    assert [u.user for u in store.list_users(limit=1, after="alice")] == ["bob"]
    # The same listings, keys alone.
    assert store.list_job_ids(active, limit=2, after="b") == ["d", "e"]
    assert store.list_job_ids([JobStatus.CANCELED]) == ["c"]
    assert store.list_instance_names([closed], limit=2) == ["vm1", "vm2"]
    assert store.stopped_instance_names(after="vm1") == ["vm2", "vm3"]
    assert store.list_user_names(limit=2, after="alice") == ["bob", "carol"]


def test_batch_gets_return_the_documents_found_by_key(store: Store) -> None:
    for job_id in ("a", "b", "c"):
        store.create_job(a_job(job_id))
    store.create_instance(an_instance("vm1", "a", InstanceStatus.EXECUTING))
    found = store.get_jobs(["c", "a", "missing", "a"])
    assert sorted(found) == ["a", "c"] and found["c"] == store.get_job("c")
    assert store.get_jobs([]) == {}
    assert store.get_jobs(iter(["b"])).keys() == {"b"}  # any iterable, read once
    assert store.get_instances(["vm1", "vm9"]) == {"vm1": store.get_instance("vm1")}
    store.update_user("bob", lambda u: u)
    assert store.get_users(["bob", "nobody"]) == {"bob": store.get_user("bob")}


def test_instance_lists_take_one_user_s_only(store: Store) -> None:
    closed, stopped = InstanceStatus.CLOSED, InstanceSubstatus.STOPPED
    for name, user in (("vm1", "alice"), ("vm2", "bob"), ("vm3", "alice")):
        doc = an_instance(name, "a", closed, stopped).model_copy(update={"user": user})
        store.create_instance(doc)
    store.create_instance(an_instance("vm4", "a", InstanceStatus.COOLING))
    assert [i.name for i in store.stopped_instances(user="alice")] == ["vm1", "vm3"]
    assert [i.name for i in store.stopped_instances(user="alice", after="vm1")] == ["vm3"]
    assert [i.name for i in store.list_instances([closed], user="bob")] == ["vm2"]
    assert store.list_instances([InstanceStatus.COOLING], user="bob") == []
    with pytest.raises(ValueError, match="give one value"):
        store.list_instances([closed, InstanceStatus.COOLING], user="bob")
