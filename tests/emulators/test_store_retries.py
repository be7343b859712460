"""A guarded write that lost a race, in both stores, under the one retry
policy (``spotline.shared.retries.CONTENTION``): re-read and applied again,
a refusal of the change raised at once, and endless contention reported as
a TransientError at the deadline instead of waited out."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import TransientError
from spotline.shared.ports.store import Store
from spotline.shared.retries import Backoff
from tests.store_contract import a_job

QUICK = Backoff(initial_s=0.001, maximum_s=0.02, deadline_s=1.0)
StoreAndRival = tuple[Store, Store]


@pytest.fixture(params=["memory", pytest.param("firestore", marks=pytest.mark.emulators)])
def stores(request: pytest.FixtureRequest) -> StoreAndRival:
    """A store with a quick contention policy, and a rival writer of the same documents."""
    if request.param == "memory":
        store = InMemoryStore(contention=QUICK)
        return store, store
    project = request.getfixturevalue("project")
    return FirestoreStore(project, contention=QUICK), FirestoreStore(project)


def racing(
    rival: Store, times: int, then: Callable[[JobDoc], JobDoc]
) -> Callable[[JobDoc], JobDoc]:
    """A change during whose first ``times`` runs the rival writes the job first."""
    runs = [0]

    def change(job: JobDoc) -> JobDoc:
        runs[0] += 1
        if runs[0] <= times:
            rival.update_job(
                job.job_id, lambda j: j.model_copy(update={"preemptions": j.preemptions + 1})
            )
        return then(job)

    return change


def test_a_write_that_lost_a_race_is_applied_again_on_the_winners_document(
    stores: StoreAndRival,
) -> None:
    store, rival = stores
    store.create_job(a_job())

    written = store.update_job("job1", racing(rival, 2, lambda j: j.model_copy(update={"step": 7})))

    stored = store.get_job("job1")
    assert written is not None and stored is not None
    assert (stored.step, stored.preemptions) == (7, 2)  # ours on top of both of the rival's


def test_a_refused_change_is_raised_at_once_and_writes_nothing(stores: StoreAndRival) -> None:
    store, rival = stores
    rival.create_job(a_job())  # no version kept by ``store``: its change runs on a read
    runs = [0]

    def refuse(job: JobDoc) -> JobDoc:
        runs[0] += 1
        raise ValueError("a stale event")

    with pytest.raises(ValueError, match="a stale event"):
        store.update_job("job1", refuse)
    assert runs[0] == 1
    assert store.get_job("job1") == a_job()


def test_endless_contention_ends_at_the_deadline_as_transient(stores: StoreAndRival) -> None:
    store, rival = stores
    store.create_job(a_job())
    started = time.monotonic()

    with pytest.raises(TransientError, match="too much write contention"):
        store.update_job("job1", racing(rival, 10**6, lambda j: j.model_copy(update={"step": 7})))

    assert time.monotonic() - started < QUICK.deadline_s + 20  # generous: a loaded machine
    stored = store.get_job("job1")
    assert stored is not None and stored.step == 0 and stored.preemptions > 1
