"""Spot recovery through the handlers: preemption reports from the agent and
from the log sink, cancel, and every branch of the reaper. Real functions
framework, real Firestore emulator, VMs from the local cloud through GceCompute."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import (
    CancelRequest,
    Heartbeat,
    JobFinished,
    ReaperTick,
    SpotPreempted,
    VmBooted,
)
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from tests.conftest import SPEC, vm_event

pytestmark = pytest.mark.emulators


def log_sink_entry(host: LocalCloud, instance: str, zone: str = "us-central1-a") -> dict[str, Any]:
    """What a Cloud Logging sink publishes for a preemption (an audit LogEntry),
    naming the VM by name and by its numeric id."""
    vm = host.get(instance, zone)
    assert vm is not None
    return {
        "protoPayload": {
            "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
            "methodName": "compute.instances.preempted",
            "resourceName": f"projects/p/zones/{zone}/instances/{instance}",
            "serviceName": "compute.googleapis.com",
        },
        "resource": {"type": "gce_instance", "labels": {"zone": zone, "instance_id": vm["id"]}},
        "logName": "projects/p/logs/cloudaudit.googleapis.com%2Fsystem_event",
        "severity": "INFO",
    }


def running(call: Callable[..., Any], spec: dict[str, Any] | None = None) -> None:
    """Submit the job and bring it to TRAINING on attempt 1."""
    call("submit_job", "submit", spec or SPEC, message_id="submit")
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING"), message_id="hb")


def names(host: LocalCloud) -> list[str]:
    return sorted(vm["name"] for vm in host.list())


def test_a_preemption_starts_the_next_attempt_at_once(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    running(call)
    notice = vm_event(SpotPreempted, step=77, checkpoint_uri="file:///c/ckpt-77.pt")
    assert call("on_spot_preempted", "spot_preempted", notice, message_id="p1").status_code == 200
    store = FirestoreStore(project)
    job = store.get_job("job1")
    assert job is not None
    assert (job.status, job.substatus, job.attempt) == ("RECOVERING", "CONNECTING_SERVER", 2)
    assert job.preemptions == 1 and job.checkpoint_uri == "file:///c/ckpt-77.pt"
    assert [h.substatus for h in job.history][-3:] == [
        "PREEMPTED",
        "REQUESTING_SERVER",
        "CONNECTING_SERVER",
    ]
    assert "state saved at step 77" in job.history[-3].note
    first, second = job.attempts
    assert (first.outcome, first.checkpoint_step, second.instance) == (
        "preempted",
        77,
        "sl-job1-a2",
    )
    old = store.get_instance("sl-job1-a1")
    assert old is not None and (old.status, old.substatus) == ("CLOSED", "PREEMPTED")
    assert names(host) == ["sl-job1-a2"]
    assert store.get_queue("job1") is None


def test_every_report_of_one_preemption_counts_once(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    running(call)
    # The log sink first (the VM keeps its notice to save state), then the
    # agent's own report, redelivered, and the log entry again.
    entry = log_sink_entry(host, "sl-job1-a1")
    call("on_spot_preempted", "spot_preempted", entry, message_id="l1")
    assert names(host) == ["sl-job1-a1", "sl-job1-a2"]  # the preempted VM is not cut short
    notice = vm_event(SpotPreempted, step=10)
    for message_id in ("p1", "p1", "l1"):
        payload = notice if message_id == "p1" else entry
        call("on_spot_preempted", "spot_preempted", payload, message_id=message_id)
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and (job.attempt, job.preemptions) == (2, 1)
    assert len(job.attempts) == 2
    # The reaper deletes the preempted VM once nothing owns it.
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert names(host) == ["sl-job1-a2"]


def test_a_finish_that_comes_after_the_preemption_log_completes_attempt_1(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """On Firestore: the trainer exited 0 as the VM was preempted, and
    the log sink's entry came first (attempt 2 placed at once)."""
    running(call)
    call("on_spot_preempted", "spot_preempted", log_sink_entry(host, "sl-job1-a1"), message_id="l1")
    assert names(host) == ["sl-job1-a1", "sl-job1-a2"]
    for message_id in ("f1", "f1"):  # and redelivered
        finished = vm_event(JobFinished, exit_code=0)
        assert (
            call("on_job_finished", "job_finished", finished, message_id=message_id).status_code
            == 200
        )
    store = FirestoreStore(project)
    job = store.get_job("job1")
    assert job is not None
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.COMPLETED, 1, 0)
    assert [(a.attempt, a.outcome) for a in job.attempts] == [(1, "completed"), (2, "superseded")]
    second = store.get_instance("sl-job1-a2")
    assert second is not None and second.status == InstanceStatus.CLOSED
    assert names(host) == ["sl-job1-a1"]  # kept through its notice; the reaper ends it
    assert store.get_queue("job1") is None
    user = store.get_user("alice")
    assert user is not None and (user.active_jobs, user.active_instances) == ([], [])


def test_events_of_the_preempted_attempt_are_ignored_afterwards(
    call: Callable[..., Any], project: str
) -> None:
    running(call)
    call("on_spot_preempted", "spot_preempted", vm_event(SpotPreempted), message_id="p1")
    call("on_vm_booted", "vm_booted", vm_event(VmBooted), message_id="late-boot")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and (job.attempt, job.substatus) == (2, "CONNECTING_SERVER")


def test_max_attempts_ends_the_job_with_the_reason(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    running(call, {**SPEC, "max_attempts": 1})
    call("on_spot_preempted", "spot_preempted", vm_event(SpotPreempted), message_id="p1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.status == JobStatus.FAILED
    assert job.error is not None and "gave up after 1 attempt(s)" in job.error
    assert names(host) == []


def test_repeated_preemptions_fall_back_to_on_demand(
    call: Callable[..., Any], project: str
) -> None:
    running(call, {**SPEC, "fallback_after_preemptions": 1, "on_demand_fallback": True})
    call("on_spot_preempted", "spot_preempted", vm_event(SpotPreempted), message_id="p1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.machine_id == "g2-standard-4.od"
    assert job.avoid_machine_ids == ["g2-standard-4"]
    instance = FirestoreStore(project).get_instance("sl-job1-a2")
    assert instance is not None and instance.provisioning == "STANDARD"


def test_cancel_deletes_the_vm_and_is_idempotent(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    running(call)
    request = CancelRequest(job_id="job1", reason="wrong learning rate")
    for message_id in ("c1", "c1", "c2"):
        assert call("cancel_job", "cancel", request, message_id=message_id).status_code == 200
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.status == JobStatus.CANCELED
    assert job.error == "wrong learning rate"
    instance = FirestoreStore(project).get_instance("sl-job1-a1")
    assert instance is not None and instance.status == InstanceStatus.CLOSED
    assert names(host) == []
    unknown = CancelRequest(job_id="nope")
    assert call("cancel_job", "cancel", unknown, message_id="c3").status_code == 200


def test_the_reaper_requeues_a_missed_preemption(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    running(call)
    host.kill("sl-job1-a1")  # gone, with no notice and no event
    for tick in ("t1", "t2"):  # Scheduler may fire twice
        call("reaper", "reaper_tick", ReaperTick(), message_id=tick)
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and (job.attempt, job.preemptions) == (2, 1)
    assert "missed preemption" in job.history[-3].note
    assert names(host) == ["sl-job1-a2"]


def test_a_report_that_comes_after_the_reaper_still_records_the_saved_step(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    running(call)
    # The agent saved at step 42 and published, then its VM went away; the
    # reaper's sweep saw the VM gone before the report was delivered.
    host.kill("sl-job1-a1")
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    notice = vm_event(SpotPreempted, step=42, checkpoint_uri="file:///c/ckpt-42.pt")
    call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and (job.attempt, job.preemptions) == (2, 1)
    first = job.attempts[0]
    assert (first.outcome, first.checkpoint_step) == ("preempted", 42)


def test_the_reaper_replaces_a_stalled_vm(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    running(call)
    call("on_vm_booted", "vm_booted", vm_event(VmBooted), message_id="boot")
    monkeypatch.setenv("SPOTLINE_STALL_TIMEOUT_S", "0")
    deps.reset()
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    store = FirestoreStore(project)
    job = store.get_job("job1")
    assert job is not None and (job.attempt, job.preemptions) == (2, 0)
    assert [h.substatus for h in job.history][-3] == JobSubstatus.STALLED
    old = store.get_instance("sl-job1-a1")
    assert old is not None and (old.status, old.substatus) == ("CLOSED", "TERMINATED")
    assert names(host) == ["sl-job1-a2"]


def test_the_reaper_deletes_orphans(call: Callable[..., Any], host: LocalCloud) -> None:
    labels = {"spotline": "true", "spotline-job": "ghost", "spotline-attempt": "1"}
    host.insert(
        {
            "name": "sl-ghost-a1",
            "zone": "us-central1-a",
            "machine_type": "e2-standard-4",
            "labels": labels,
        }
    )
    running(call)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert names(host) == ["sl-job1-a1"]


def test_the_reaper_cancels_a_job_past_its_max_runtime(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    running(call, {**SPEC, "max_runtime_s": 1})
    store = FirestoreStore(project)
    store.update_job(
        "job1",
        lambda job: job.model_copy(update={"created_at": datetime.now(UTC) - timedelta(seconds=5)}),
    )
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    job = store.get_job("job1")
    assert job is not None and job.status == JobStatus.CANCELED
    assert job.error is not None and "max_runtime_s=1" in job.error
    assert names(host) == []


def test_the_reaper_places_a_job_whose_function_died(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host.capacity_errors.update(
        {
            "us-central1-a": "ZONE_RESOURCE_POOL_EXHAUSTED",
            "us-central1-b": "ZONE_RESOURCE_POOL_EXHAUSTED",
        }
    )
    call("submit_job", "submit", SPEC, message_id="s")
    host.capacity_errors.clear()
    store = FirestoreStore(project)
    store.delete_queue("job1")  # as if the function died before queueing it
    store.update_job(
        "job1", lambda job: job.model_copy(update={"substatus": JobSubstatus.REQUESTING_SERVER})
    )
    monkeypatch.setenv("SPOTLINE_REQUEST_TIMEOUT_S", "0")
    deps.reset()
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    job = store.get_job("job1")
    assert job is not None and job.substatus == JobSubstatus.CONNECTING_SERVER
    assert names(host) == ["sl-job1-a1"]
