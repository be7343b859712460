"""Per-user quotas: pure slot arithmetic, then through the handlers on the
Firestore emulator, with 20 concurrent submissions of one user."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import JobFinished, ReaperTick
from spotline.shared.domain.quotas import take_slot
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.conftest import SPEC, submit_concurrently, vm_event

T0 = datetime(2026, 11, 21, tzinfo=UTC)


def job_spec(n: int, **fields: Any) -> dict[str, Any]:
    return {**SPEC, "job_id": f"job{n}", **fields}


@pytest.fixture
def two_slots(monkeypatch: pytest.MonkeyPatch, host: LocalCloud) -> None:
    monkeypatch.setenv("SPOTLINE_MAX_ACTIVE_JOBS", "2")
    deps.reset()


@pytest.mark.emulators
@pytest.mark.usefixtures("two_slots")
def test_over_quota_waits_and_starts_when_a_slot_frees(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    for n in (1, 2, 3):
        call("submit_job", "submit", job_spec(n), message_id=f"s{n}")
    store = FirestoreStore(project)
    waiting = store.get_job("job3")
    assert waiting is not None and waiting.substatus == JobSubstatus.WAITING_FOR_QUOTA
    assert "has 2 active jobs (quota 2)" in waiting.history[-1].note
    entry = store.get_queue("job3")
    assert entry is not None and (entry.reason, entry.user) == ("quota", "alice")
    assert len(host.list()) == 2
    finished = vm_event(JobFinished, exit_code=0)  # job1's VM is sl-job1-a1
    call("on_job_finished", "job_finished", finished, message_id="f1")
    started = store.get_job("job3")
    assert started is not None and started.substatus == JobSubstatus.CONNECTING_SERVER
    user = store.get_user("alice")
    assert user is not None and sorted(user.active_jobs) == ["job2", "job3"]


@pytest.mark.emulators
@pytest.mark.usefixtures("two_slots")
def test_a_job_over_quota_past_its_wait_is_canceled(call: Callable[..., Any], project: str) -> None:
    for n in (1, 2, 3):
        call("submit_job", "submit", job_spec(n, wait_new_job_create_s=5), message_id=f"s{n}")
    store = FirestoreStore(project)
    entry = store.get_queue("job3")
    assert entry is not None
    store.put_queue(
        entry.model_copy(
            update={
                "not_before": datetime.now(UTC),
                "enqueued_at": datetime.now(UTC) - timedelta(seconds=9),
            }
        )
    )
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    job = store.get_job("job3")
    assert job is not None and job.status == JobStatus.CANCELED
    assert job.error is not None and "wait_new_job_create_s=5" in job.error


@pytest.mark.emulators
def test_the_reaper_frees_a_slot_a_crash_left_behind(
    call: Callable[..., Any], project: str
) -> None:
    store = FirestoreStore(project)
    store.update_user("alice", lambda user: take_slot(user, "active_jobs", "ghost", 5, T0))
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    user = store.get_user("alice")
    assert user is not None and user.active_jobs == []


@pytest.mark.emulators
def test_twenty_concurrent_submissions_never_exceed_the_quota(
    host: LocalCloud, project: str, repo_root: Path
) -> None:
    most_vms = submit_concurrently(host, project, repo_root, [job_spec(n) for n in range(20)])

    store = FirestoreStore(project)
    jobs = store.list_jobs()
    assert len(jobs) == 20
    placed = [j for j in jobs if j.substatus == JobSubstatus.CONNECTING_SERVER]
    waiting = [j for j in jobs if j.substatus == JobSubstatus.WAITING_FOR_QUOTA]
    assert (len(placed), len(waiting)) == (5, 15)
    user = store.get_user("alice")
    assert user is not None and sorted(user.active_jobs) == sorted(j.job_id for j in placed)
    assert most_vms <= 5 and len(host.list()) == 5
    assert sorted(user.active_instances) == sorted(vm["name"] for vm in host.list())
