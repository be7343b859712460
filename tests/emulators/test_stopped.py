"""Stopped on-demand instances, through the functions framework: a finished
job's VM is stopped (disk kept), the user's next job restarts it, and the
reaper deletes it when its stop period ends."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.functions import deps
from spotline.functions.ops.teardown import release_instance, stop_instance
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import Heartbeat, JobFinished, ReaperTick
from spotline.shared.domain.documents import InstanceDoc
from spotline.shared.domain.lifecycle import instance_closing
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobSubstatus
from tests.conftest import SPEC, vm_event

pytestmark = pytest.mark.emulators
STOP = {**SPEC, "machine_ids": ["g2-standard-4.od"], "stop_period_s": 3600}
VM = "sl-job1-a1"


def finish_first_job(call: Callable[..., Any], spec: dict[str, Any] = STOP) -> None:
    call("submit_job", "submit", spec, message_id="s1")
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING"), message_id="h1")
    call("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0), message_id="f1")


def state(instance_name: str, project: str) -> tuple[str, str | None]:
    instance = FirestoreStore(project).get_instance(instance_name)
    assert instance is not None
    return instance.status, instance.substatus


def test_a_finished_on_demand_job_leaves_its_vm_stopped(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    finish_first_job(call)
    store = FirestoreStore(project)
    instance = store.get_instance(VM)
    assert instance is not None and state(VM, project) == ("CLOSED", "STOPPED")
    assert instance.stopped_until is not None and instance.closed_at is not None
    assert (instance.stopped_until - instance.closed_at).total_seconds() == 3600
    assert instance.cost_usd > 0 and instance.price_per_hour == 0
    vm = host.get(VM)
    assert vm is not None and vm["state"] == "TERMINATED"  # stopped, not deleted
    user = store.get_user("alice")
    assert user is not None and user.stopped_instances == [VM] and user.active_jobs == []
    # A redelivered job-finished changes nothing.
    call("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0), message_id="f1")
    assert state(VM, project) == ("CLOSED", "STOPPED")


def test_the_next_job_of_the_user_restarts_it(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    finish_first_job(call)
    call("submit_job", "submit", {**STOP, "job_id": "job2"}, message_id="s2")
    store = FirestoreStore(project)
    job = store.get_job("job2")
    assert job is not None and job.instance == VM
    assert job.substatus == JobSubstatus.CONNECTING_SERVER
    instance = store.get_instance(VM)
    assert instance is not None and (instance.status, instance.job_id) == ("LAUNCHING", "job2")
    assert instance.booted_at is None and instance.last_heartbeat_at is None
    vm = host.get(VM)
    assert vm is not None and vm["state"] == "RUNNING"
    assert '"job_id":"job2"' in vm["metadata"]["spotline-job"]
    assert [v["name"] for v in host.list()] == [VM]  # no new VM
    user = store.get_user("alice")
    assert user is not None and user.stopped_instances == []
    # A redelivered submit boots the same VM again: still one VM.
    call("submit_job", "submit", {**STOP, "job_id": "job2"}, message_id="s2")
    assert [v["name"] for v in host.list()] == [VM]
    # It finishes on that VM, which is stopped again for the next one.
    done = {"job_id": "job2", "instance": VM}
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING", **done))
    call("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0, **done))
    assert state(VM, project) == ("CLOSED", "STOPPED")


def test_spot_vms_and_a_full_quota_delete_instead(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_MAX_STOPPED_INSTANCES", "0")
    deps.reset()
    finish_first_job(call)
    assert state(VM, project) == ("CLOSED", "TERMINATED")
    assert host.list() == []
    # A Spot VM is never stopped (here the first, Spot, machine id is placed).
    monkeypatch.setenv("SPOTLINE_MAX_STOPPED_INSTANCES", "4")
    deps.reset()
    spot_first = {**STOP, "job_id": "job2", "machine_ids": ["g2-standard-4", "g2-standard-4.od"]}
    call("submit_job", "submit", spot_first, message_id="s2")
    done = {"job_id": "job2", "instance": "sl-job2-a1"}
    call("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0, **done))
    assert state("sl-job2-a1", project) == ("CLOSED", "TERMINATED")


def test_the_reaper_keeps_it_then_deletes_it_when_the_period_ends(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    finish_first_job(call)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert state(VM, project) == ("CLOSED", "STOPPED")
    assert host.get(VM) is not None  # not taken for an orphan

    store = FirestoreStore(project)
    store.update_instance(
        VM,
        lambda i: i.model_copy(update={"stopped_until": datetime.now(UTC) - timedelta(seconds=1)}),
    )
    call("reaper", "reaper_tick", ReaperTick(), message_id="t2")
    assert state(VM, project) == ("CLOSED", "TERMINATED")
    assert host.get(VM) is None
    user = store.get_user("alice")
    assert user is not None and user.stopped_instances == []
    # An expired VM is not restarted: the next job gets a new one.
    call("submit_job", "submit", {**STOP, "job_id": "job2"}, message_id="s2")
    assert [v["name"] for v in host.list()] == ["sl-job2-a1"]


def test_a_cooling_on_demand_vm_is_stopped_when_its_period_ends(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    finish_first_job(call, {**STOP, "cool_down_period_s": 600})
    assert state(VM, project) == ("COOLING", None)
    FirestoreStore(project).update_instance(
        VM,
        lambda i: i.model_copy(update={"cooling_until": datetime.now(UTC) - timedelta(seconds=1)}),
    )
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert state(VM, project) == ("CLOSED", "STOPPED")
    vm = host.get(VM)
    assert vm is not None and vm["state"] == "TERMINATED"
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.cooling_charges.keys() == {VM}


def test_a_vm_deleted_while_stopped_is_closed(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    finish_first_job(call)
    host.delete(VM)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert state(VM, project) == ("CLOSED", "TERMINATED")
    user = FirestoreStore(project).get_user("alice")
    assert user is not None and user.stopped_instances == []


def test_a_stop_interrupted_by_a_crash_is_finished_by_the_reaper(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", STOP, message_id="s1")
    store = FirestoreStore(project)

    # The function wrote CLOSING/STOPPING, then died before stopping the VM.
    def died_stopping(i: InstanceDoc, seconds_ago: float) -> InstanceDoc:
        closing = {"status": InstanceStatus.CLOSING, "substatus": InstanceSubstatus.STOPPING}
        since = datetime.now(UTC) - timedelta(seconds=seconds_ago)
        return i.model_copy(update={**closing, "updated_at": since})

    store.update_instance(VM, lambda i: died_stopping(i, 1))
    # While that function may still be at it, the reaper leaves the stop to it.
    call("reaper", "reaper_tick", ReaperTick(), message_id="t0")
    assert state(VM, project) == ("CLOSING", "STOPPING")
    # Past the request timeout (120 s) it must have died: the reaper stops the VM.
    store.update_instance(VM, lambda i: died_stopping(i, 121))
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert state(VM, project) == ("CLOSED", "STOPPED")
    vm = host.get(VM)
    assert vm is not None and vm["state"] == "TERMINATED"


def test_the_reaper_frees_a_stopped_slot_whose_instance_is_not_stopped(
    call: Callable[..., Any], project: str
) -> None:
    finish_first_job(call)
    store = FirestoreStore(project)
    # A crash between taking the slot and stopping, then the VM deleted.
    store.update_user("alice", lambda u: u.model_copy(update={"stopped_instances": [VM, "gone"]}))
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    user = store.get_user("alice")
    assert user is not None and user.stopped_instances == [VM]


def test_a_release_from_a_stale_sweep_keeps_a_vm_its_job_stopped(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    # The reaper listed the instance while its job was still running, then
    # found the job ended and released it: after on_job_finished stopped it.
    finish_first_job(call)
    assert state(VM, project) == ("CLOSED", "STOPPED")
    release_instance(deps.current(), VM, datetime.now(UTC), note="no live job owns it")
    assert state(VM, project) == ("CLOSED", "STOPPED")
    vm = host.get(VM)
    assert vm is not None and vm["state"] == "TERMINATED"


def test_a_stop_that_comes_after_a_release_began_lets_the_release_finish(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", STOP, message_id="s1")
    now = datetime.now(UTC)
    store = FirestoreStore(project)
    store.update_instance(VM, lambda current: instance_closing(current, now, "released"))
    instance = store.get_instance(VM)
    assert instance is not None
    stop_instance(deps.current(), instance, 3600, now, "job completed")
    assert state(VM, project) == ("CLOSING", "TERMINATING")  # not stopped under the release
    user = store.get_user("alice")
    assert user is not None and user.stopped_instances == []


def test_a_vm_restarted_during_a_sweep_is_no_orphan(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    from spotline.functions.ops.sweep_pages import reap_vms  # the sweep's stage, on a stale listing

    finish_first_job(call)
    listed = deps.current().compute.get("us-central1-a", VM) or deps.current().compute.get(
        "us-central1-b", VM
    )
    assert listed is not None  # listed while stopped, owned by no live instance...
    call("submit_job", "submit", {**STOP, "job_id": "job2"}, message_id="s2")  # ...then restarted
    assert not reap_vms(deps.current(), [], [], [listed], datetime.now(UTC))
    vm = host.get(VM)
    assert vm is not None and vm["state"] == "RUNNING"
