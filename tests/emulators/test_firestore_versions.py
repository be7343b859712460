"""The Firestore store's guarded updates of a job it has just written
(``spotline.shared.adapters.firestore_versions``): the read before the write is
saved when no one else wrote since, and nothing another writer did is lost
when someone did."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from spotline.shared.adapters.counting_store import CountingStore
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.firestore_versions import WrittenVersions
from spotline.shared.domain.documents import JobDoc
from tests.store_contract import T0, a_job

pytestmark = pytest.mark.emulators


def _preempted(n: int) -> Callable[[JobDoc], JobDoc]:
    return lambda job: job.model_copy(update={"preemptions": n})


def _costlier(job: JobDoc) -> JobDoc:
    return job.model_copy(update={"cost_usd": job.cost_usd + 1.0})


def _stored(project: str) -> JobDoc:
    job = FirestoreStore(project).get_job("job1")
    assert job is not None
    return job


def test_updates_after_this_store_s_own_writes_read_nothing(project: str) -> None:
    """A handler writes its job several times in a row (created, outbox
    emptied, moved on): each guarded update starts from the version it wrote."""
    store = CountingStore(FirestoreStore(project))
    store.create_job(a_job())
    before = store.ops.snapshot()
    store.update_job("job1", _preempted(1))
    store.update_job("job1", _costlier)
    ops = store.ops - before
    assert (ops.reads, ops.writes) == (0, 2)
    assert (_stored(project).preemptions, _stored(project).cost_usd) == (1, 1.0)


def test_another_writer_s_change_is_kept(project: str) -> None:
    mine, other = CountingStore(FirestoreStore(project)), FirestoreStore(project)
    mine.create_job(a_job())
    other.update_job("job1", _preempted(2))
    before = mine.ops.snapshot()
    mine.update_job("job1", _costlier)
    ops = mine.ops - before
    assert (ops.reads, ops.writes) == (1, 1)  # the kept version was stale: read
    assert (_stored(project).preemptions, _stored(project).cost_usd) == (2, 1.0)


def test_a_kept_version_never_decides_that_nothing_is_to_be_written(project: str) -> None:
    mine, other = FirestoreStore(project), FirestoreStore(project)
    mine.create_job(a_job())
    mine.update_job("job1", _preempted(1))
    other.update_job("job1", _preempted(0))
    # Already 1 in what ``mine`` wrote last, but not in the document.
    assert mine.update_job("job1", _preempted(1)) is not None
    assert _stored(project).preemptions == 1


def test_a_kept_version_never_refuses_a_change(project: str) -> None:
    """A change may refuse a document (an event for attempt 2 on a job still
    at attempt 1 is stale): from a kept version, which may be stale, that
    refusal is not final. The Keras stack test lost its resumed heartbeat so:
    the process had written attempt 1, another moved the job to attempt 2."""
    mine, other = FirestoreStore(project), FirestoreStore(project)
    mine.create_job(a_job())
    mine.update_job("job1", _preempted(1))
    other.update_job("job1", lambda job: job.model_copy(update={"attempt": 2}))

    def for_attempt_2(job: JobDoc) -> JobDoc:
        if job.attempt != 2:
            raise ValueError(f"stale: the job is at attempt {job.attempt}")
        return _costlier(job)

    assert mine.update_job("job1", for_attempt_2) is not None
    assert (_stored(project).attempt, _stored(project).cost_usd) == (2, 1.0)


def test_a_version_is_kept_for_a_request_s_course_not_until_the_next_sweep() -> None:
    """The reaper, a minute after its last sweep, updates jobs the VMs'
    events have written since: a version that old is not tried (a refused
    write would cost more than the read it saves)."""
    now = [0.0]
    versions = WrittenVersions(max_age_s=30.0, clock=lambda: now[0])
    versions.put("jobs", "job1", {"preemptions": 1}, T0)
    now[0] = 29.0
    assert versions.get("jobs", "job1") == ({"preemptions": 1}, T0)
    now[0] = 61.0
    assert versions.get("jobs", "job1") is None


def test_the_oldest_version_goes_first() -> None:
    versions = WrittenVersions(size=2)
    for key in ("a", "b", "c"):
        versions.put("jobs", key, {}, T0)
    assert [versions.get("jobs", k) is not None for k in ("a", "b", "c")] == [False, True, True]
