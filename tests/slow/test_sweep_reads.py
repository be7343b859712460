"""What one sweep reads, counted as Firestore bills it (``CountingStore``):
every active document, however many pages they fill, and no terminal job.

The in-memory store keeps these fast; ``tests/store_contract.py`` holds
Firestore to the same paging. ``make bench-scale`` measures the same at
10,000 active jobs on the emulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pytest

from spotline.functions.deps import Deps
from spotline.functions.ops import sweep_pages
from spotline.functions.ops.sweep import sweep
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.counting_store import CountingStore
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain.documents import UserDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.settings import Settings
from tests.documents import at, instance, job
from tests.local_cloud import add_instance, client

# More than one page of each listing the sweep makes (the old fixed limits
# were 200 jobs and 1000 users: the rest were never swept).
ACTIVE_JOBS = 450
USERS = 1100


@pytest.fixture
def world(cloud: LocalCloud) -> Iterator[tuple[Deps, CountingStore, InMemoryStore]]:
    inner = InMemoryStore()
    store = CountingStore(inner)
    settings = Settings(project=cloud.project, zones=("us-central1-a",))
    yield Deps(settings, store=store, compute=client(cloud)), store, inner


def _seed(inner: InMemoryStore, active: int, terminal: int, users: int) -> None:
    for n in range(active):
        inner.create_job(job(f"run{n:05}", substatus=JobSubstatus.TRAINING, pending_events=[]))
    for n in range(terminal):
        done = job(f"done{n:05}", status=JobStatus.COMPLETED, substatus=JobSubstatus.COMPLETED)
        inner.create_job(done.model_copy(update={"pending_events": []}))
    for n in range(users):
        inner.update_user(f"user{n:05}", lambda u: u)


def test_a_sweep_lists_every_active_job_and_user_past_one_page(
    world: tuple[Deps, CountingStore, InMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, store, inner = world
    monkeypatch.setattr(sweep_pages, "KEYS_PER_CALL", 100)  # several calls each
    _seed(inner, ACTIVE_JOBS, 3, USERS)
    # The last user listed holds the slot of a job that is gone (a crash).
    inner.update_user(f"user{USERS - 1:05}", partial(_holding, job_id="gone"))
    sweep(deps, at(60))
    # Listed as keys, past every page of each listing.
    assert store.ops.by_method["list_job_ids.calls"] == ACTIVE_JOBS // 100 + 1
    assert store.ops.by_method["list_job_ids.reads"] == ACTIVE_JOBS
    # 1,100 users fill 11 calls; the 12th finds none, billed one read.
    assert store.ops.by_method["list_users.reads"] == USERS + 1
    # Only that user's slots are in doubt: read again, and freed.
    assert store.ops.by_method["get_users.reads"] == 1
    last = inner.get_user(f"user{USERS - 1:05}")
    assert last is not None and last.active_jobs == []
    # Stage 2 accrues each running job: every one of them, not the first page.
    assert store.ops.by_method["update_job.reads"] == ACTIVE_JOBS


def test_terminal_jobs_add_no_reads_to_a_sweep(
    world: tuple[Deps, CountingStore, InMemoryStore],
) -> None:
    deps, store, inner = world
    _seed(inner, 20, 5, 3)
    sweep(deps, at(60))  # prices the running jobs, which the next sweeps leave be
    start = store.ops.snapshot()
    sweep(deps, at(120))
    before = store.ops - start
    start = store.ops.snapshot()
    for n in range(5, 300):
        # As terminal jobs are: their state changes published (the outbox empty).
        done = job(f"done{n:05}", status=JobStatus.CANCELED, substatus=JobSubstatus.CANCELED)
        inner.create_job(done.model_copy(update={"pending_events": []}))
    inner.update_user("user00000", lambda u: u.model_copy(update={"active_jobs": []}))
    sweep(deps, at(180))
    second = store.ops - start
    assert second.reads == before.reads
    assert second.writes == before.writes == 0


def _holding(user: UserDoc, job_id: str) -> UserDoc:
    return user.model_copy(update={"active_jobs": [job_id]})


def _holding_all(user: UserDoc, held: dict[str, list[str]]) -> UserDoc:
    return user.model_copy(update=held)


def test_the_counting_store_knows_every_call_of_the_port() -> None:
    from spotline.shared.adapters import counting_store
    from spotline.shared.ports.store import Store

    port = {name for name in vars(Store) if not name.startswith("_")}
    assert port == counting_store.METHODS
    with pytest.raises(AttributeError, match="bills 'version'"):
        CountingStore(InMemoryStore()).version  # noqa: B018


def test_the_counting_store_counts_reads_writes_and_deletes() -> None:
    store = CountingStore(InMemoryStore())
    assert store.get_job("none") is None
    store.create_job(job("a"))
    assert not store.create_job(job("a"))  # exists: nothing written
    store.update_job("a", lambda j: j)  # unchanged: a read, no write
    store.update_job("a", lambda j: j.model_copy(update={"cost_usd": 1.0}))
    store.update_job("missing", lambda j: j)
    store.list_jobs()  # one document
    store.list_jobs([JobStatus.FAILED])  # none: still one read
    store.delete_queue("a")
    ops = store.ops
    assert (ops.reads, ops.writes, ops.deletes) == (1 + 1 + 1 + 1 + 1 + 1, 2, 1)
    assert ops.by_method["update_job.reads"] == 3
    assert ops.by_method["update_job.writes"] == 1


def test_a_sweep_s_round_trips_do_not_grow_with_the_jobs_it_reads(
    world: tuple[Deps, CountingStore, InMemoryStore],
) -> None:
    """Each round trip to Firestore costs milliseconds: 10,000 single gets
    made a sweep take minutes. Jobs are read in batches (in one page here:
    each page of a tick makes its own few)."""
    deps, store, inner = world
    settings = deps.settings.model_copy(update={"reaper_page_size": 5000})
    deps = Deps(settings, store=store, compute=deps.compute)
    calls: list[int] = []
    for users in (10, 120):
        for n in range(len(calls) * 10, users):
            job_id = f"new{n:05}"
            inner.create_job(job(job_id, substatus=JobSubstatus.REQUESTING_SERVER))
            inner.update_user(f"user{n:05}", partial(_holding, job_id=job_id))
        before = store.ops.snapshot()
        sweep(deps, at(1))
        calls.append((store.ops - before).calls)
    assert calls[0] == calls[1]


@pytest.mark.slow
def test_a_sweep_reads_each_active_job_of_an_instance_once(
    world: tuple[Deps, CountingStore, InMemoryStore],
) -> None:
    """Stage 1 needs the jobs of the live instances, stage 2 lists the active
    jobs: stage 1 used to read the same jobs again, one batch get each."""
    deps, store, inner = world
    for n in range(ACTIVE_JOBS):
        inner.create_job(job(f"run{n:05}", pending_events=[]))
        inner.create_instance(instance(f"sl-run{n:05}-a1", f"run{n:05}"))
    inner.create_instance(instance("sl-gone-a1", "gone"))  # its job is not active: read
    sweep(deps, at(1))
    assert store.ops.by_method["list_job_ids.reads"] == ACTIVE_JOBS
    # Each job once by stages 1 and 2 (its instance's page reads it for both),
    # "gone", and stage 4's of the users whose jobs stage 1 requeued (these
    # instances have no VMs). Before: each job once more.
    assert ACTIVE_JOBS < store.ops.by_method["get_jobs.reads"] < ACTIVE_JOBS * 11 // 10


def test_a_sweep_checks_only_the_users_whose_slots_its_listings_do_not_show_held(
    world: tuple[Deps, CountingStore, InMemoryStore], cloud: LocalCloud
) -> None:
    """Stage 4 read every user, then each one's jobs and instances again:
    20,000 of a sweep's 64,005 reads at 10,000 active jobs. A slot naming a
    job the tick listed as active, or a VM it listed as live, is one stage 4
    would not free; only a user with another slot is read again. Here one
    user's job ended and a crash left its slot: that user is still checked,
    and freed."""
    deps, store, inner = world
    users = 30
    for n in range(users):
        job_id, owner = f"run{n:05}", f"user{n:05}"
        inner.create_job(job(job_id, pending_events=[], spec={"user": owner}))
        made = instance(f"sl-{job_id}-a1", job_id).model_copy(
            update={"user": owner, "zone": "us-central1-a"}
        )
        inner.create_instance(made)
        labels = {"spotline": "true", "spotline-job": job_id, "spotline-attempt": "1"}
        add_instance(cloud, made.zone, made.name, labels=labels)
        held = {"active_jobs": [job_id], "active_instances": [made.name]}
        inner.update_user(owner, partial(_holding_all, held=held))
    finished = {"status": JobStatus.COMPLETED, "substatus": JobSubstatus.COMPLETED}
    inner.create_job(
        job("done", pending_events=[], spec={"user": "zoe"}).model_copy(update=finished)
    )
    inner.update_user("zoe", partial(_holding, job_id="done"))
    sweep(deps, at(1))
    # The instances' pages read each instance and job once; stage 4, zoe.
    assert store.ops.by_method["get_users.reads"] == 1
    assert store.ops.by_method["get_instances.reads"] == users
    assert store.ops.by_method["get_jobs.reads"] == users + 1
    zoe = inner.get_user("zoe")
    assert zoe is not None and zoe.active_jobs == []
