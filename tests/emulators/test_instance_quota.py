"""The active-instances quota through the handlers: a slot per VM, cooling VMs
included; a job that needs a slot ends the user's cooling VMs first, else
waits; concurrent placements never hold more VMs than the quota."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import Heartbeat, JobFinished, ReaperTick
from spotline.shared.domain.quotas import take_slots
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from tests.conftest import SPEC, submit_concurrently, vm_event

pytestmark = pytest.mark.emulators
COOL = {**SPEC, "cool_down_period_s": 600}
T4 = ["n1-standard-8-t4"]


@pytest.fixture
def instance_quota(monkeypatch: pytest.MonkeyPatch, host: LocalCloud) -> Callable[[int], None]:
    def set_quota(limit: int) -> None:
        monkeypatch.setenv("SPOTLINE_MAX_ACTIVE_INSTANCES", str(limit))
        deps.reset()

    return set_quota


def names(host: LocalCloud) -> list[str]:
    return sorted(vm["name"] for vm in host.list())


def slots(project: str) -> list[str]:
    user = FirestoreStore(project).get_user("alice")
    assert user is not None
    return sorted(user.active_instances)


def finish(call: Callable[..., Any], job_id: str, instance: str) -> None:
    ids = {"job_id": job_id, "instance": instance}
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING", **ids))
    call("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0, **ids))


def test_a_job_ends_a_cooling_vm_to_get_its_slot(
    call: Callable[..., Any], host: LocalCloud, project: str, instance_quota: Callable[[int], None]
) -> None:
    instance_quota(2)
    call("submit_job", "submit", COOL, message_id="s1")
    finish(call, "job1", "sl-job1-a1")  # cooling, and still holding its slot
    call("submit_job", "submit", {**COOL, "job_id": "job2", "machine_ids": T4}, message_id="s2")
    assert slots(project) == ["sl-job1-a1", "sl-job2-a1"]
    # A third machine id: no cooling VM to reuse, and no free slot but the
    # cooling VM's, which ends early rather than make the job wait.
    call("submit_job", "submit", {**SPEC, "job_id": "job3", "machine_ids": ["a2-highgpu-1g"]})
    store = FirestoreStore(project)
    job3 = store.get_job("job3")
    assert job3 is not None and job3.substatus == JobSubstatus.CONNECTING_SERVER
    assert names(host) == ["sl-job2-a1", "sl-job3-a1"]
    assert slots(project) == ["sl-job2-a1", "sl-job3-a1"]
    ended = store.get_instance("sl-job1-a1")
    assert ended is not None and (ended.status, ended.substatus) == ("CLOSED", "TERMINATED")
    assert "job job3 needs its slot" in ended.history[-2].note
    job1 = store.get_job("job1")
    assert job1 is not None and job1.cooling_charges.keys() == {"sl-job1-a1"}


def test_over_the_instance_quota_a_job_waits_then_starts(
    call: Callable[..., Any], host: LocalCloud, project: str, instance_quota: Callable[[int], None]
) -> None:
    instance_quota(3)
    gang = {**SPEC, "nodes": 2}
    call("submit_job", "submit", gang, message_id="s1")
    call("submit_job", "submit", {**gang, "job_id": "job2"}, message_id="s2")
    store = FirestoreStore(project)
    waiting = store.get_job("job2")
    assert waiting is not None and waiting.substatus == JobSubstatus.WAITING_FOR_QUOTA
    assert "has 2 active instances (quota 3)" in waiting.history[-1].note
    assert names(host) == ["sl-job1-a1-n0", "sl-job1-a1-n1"]
    user = store.get_user("alice")
    assert user is not None and sorted(user.active_jobs) == ["job1", "job2"]
    # The reaper's retry finds the quota still full: it keeps waiting, with
    # its place and deadline.
    entry = store.get_queue("job2")
    assert entry is not None
    store.put_queue(entry.model_copy(update={"not_before": datetime.now(UTC)}))
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    again = store.get_queue("job2")
    assert again is not None and again.enqueued_at == entry.enqueued_at
    assert again.tries == entry.tries + 1
    finish(call, "job1", "sl-job1-a1-n1")
    finish(call, "job1", "sl-job1-a1-n0")
    started = store.get_job("job2")
    assert started is not None and started.substatus == JobSubstatus.CONNECTING_SERVER
    assert names(host) == ["sl-job2-a1-n0", "sl-job2-a1-n1"]
    assert slots(project) == ["sl-job2-a1-n0", "sl-job2-a1-n1"]


def test_waiting_for_instance_slots_past_the_deadline_cancels_and_frees_the_job_slot(
    call: Callable[..., Any], host: LocalCloud, project: str, instance_quota: Callable[[int], None]
) -> None:
    instance_quota(1)
    call("submit_job", "submit", SPEC, message_id="s1")
    late = {**SPEC, "job_id": "job2", "machine_ids": T4, "wait_new_job_create_s": 5}
    call("submit_job", "submit", late, message_id="s2")
    store = FirestoreStore(project)
    entry = store.get_queue("job2")
    assert entry is not None
    waited = datetime.now(UTC) - timedelta(seconds=9)
    store.put_queue(entry.model_copy(update={"not_before": waited, "enqueued_at": waited}))
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    job = store.get_job("job2")
    assert job is not None and job.status == JobStatus.CANCELED
    assert job.error is not None and "has 1 active instances (quota 1)" in job.error
    user = store.get_user("alice")
    assert user is not None and user.active_jobs == ["job1"]
    assert names(host) == ["sl-job1-a1"]


def test_a_gang_larger_than_the_quota_is_rejected_by_name(
    call: Callable[..., Any], host: LocalCloud, project: str, instance_quota: Callable[[int], None]
) -> None:
    instance_quota(2)
    call("submit_job", "submit", {**SPEC, "nodes": 3}, message_id="s1")
    rejection = FirestoreStore(project).get_rejection("s1")
    assert rejection is not None
    assert "nodes: 3 VMs is over the active-instances quota of 2" in rejection.reason
    assert FirestoreStore(project).get_job("job1") is None and host.list() == []


def test_the_reaper_frees_slots_of_vms_never_made_but_not_of_one_being_made(
    call: Callable[..., Any], project: str
) -> None:
    store = FirestoreStore(project)
    now = datetime.now(UTC)
    held = ["sl-ghost-a1", "sl-job1-a2", "not-a-spotline-name"]
    store.update_user("alice", lambda user: take_slots(user, "active_instances", held, 5, now))
    call("submit_job", "submit", SPEC, message_id="s1")
    # job1's second attempt is being placed: its slot is taken, no VM yet.
    store.update_job(
        "job1",
        lambda job: job.model_copy(
            update={"attempt": 2, "substatus": JobSubstatus.REQUESTING_SERVER, "updated_at": now}
        ),
    )
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    kept = slots(project)
    assert "sl-ghost-a1" not in kept and "not-a-spotline-name" not in kept
    assert "sl-job1-a2" in kept


def test_concurrent_placements_never_exceed_the_instance_quota(
    host: LocalCloud, project: str, repo_root: Path, instance_quota: Callable[[int], None]
) -> None:
    instance_quota(3)  # the job quota (5) is not what binds here
    specs = [{**SPEC, "job_id": f"job{n}"} for n in range(5)]
    most_vms = submit_concurrently(host, project, repo_root, specs)

    jobs = FirestoreStore(project).list_jobs()
    placed = sorted(j.instance or "" for j in jobs if j.substatus == JobSubstatus.CONNECTING_SERVER)
    waiting = [j for j in jobs if j.substatus == JobSubstatus.WAITING_FOR_QUOTA]
    assert (len(placed), len(waiting)) == (3, 2)
    assert most_vms <= 3 and names(host) == placed == slots(project)
    live = FirestoreStore(project).list_instances(InstanceStatus.live())
    assert sorted(i.name for i in live) == placed
