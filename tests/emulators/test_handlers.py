"""Every handler through the real functions framework, on the real Firestore
emulator, with VMs from the local cloud (records, no processes) through GceCompute."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.cli.commands import main as cli
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import EpochDone, Heartbeat, JobFinished, ReaperTick, VmBooted
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from tests.conftest import SPEC, vm_event

pytestmark = pytest.mark.emulators


@pytest.mark.parametrize("mode", ["push", "binary"])
def test_submit_creates_the_job_and_one_vm(
    call: Callable[..., Any], host: LocalCloud, project: str, mode: str
) -> None:
    assert call("submit_job", "submit", SPEC, mode=mode).status_code == 200
    job = FirestoreStore(project).get_job("job1")
    assert job is not None
    assert (job.status, job.substatus) == (JobStatus.QUEUING, JobSubstatus.CONNECTING_SERVER)
    assert (job.instance, job.zone, job.machine_id) == (
        "sl-job1-a1",
        "us-central1-a",
        "g2-standard-4",
    )
    assert [h.substatus for h in job.history] == ["REQUESTING_SERVER", "CONNECTING_SERVER"]
    instance = FirestoreStore(project).get_instance("sl-job1-a1")
    assert instance is not None and instance.status == InstanceStatus.LAUNCHING
    assert instance.provisioning == "SPOT" and instance.price_per_hour > 0
    assert [vm["name"] for vm in host.list()] == ["sl-job1-a1"]


def test_a_redelivered_submit_creates_nothing_twice(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    spec = {k: v for k, v in SPEC.items() if k != "job_id"}
    for mode in ("push", "binary", "push"):
        assert call("submit_job", "submit", spec, message_id="77", mode=mode).status_code == 200
    jobs = FirestoreStore(project).list_jobs()
    assert len(jobs) == 1 and len(jobs[0].history) == 2
    assert len(host.list()) == 1


def test_the_same_job_id_from_another_message_is_rejected(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", SPEC, message_id="1")
    assert call("submit_job", "submit", SPEC, message_id="2").status_code == 200
    rejection = FirestoreStore(project).get_rejection("2")
    assert rejection is not None and "already taken" in rejection.reason
    assert len(host.list()) == 1


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "not JSON"),
        ({"machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}, "user: Field required"),
        ({**SPEC, "epochs": "many"}, "epochs: Input should be a valid integer"),
    ],
)
def test_bad_input_is_acknowledged_recorded_and_creates_nothing(
    call: Callable[..., Any], host: LocalCloud, project: str, payload: Any, reason: str
) -> None:
    response = call("submit_job", "submit", payload, message_id="bad")
    assert response.status_code == 200  # acknowledged: no redelivery loop
    rejection = FirestoreStore(project).get_rejection("bad")
    assert rejection is not None and reason in rejection.reason
    assert FirestoreStore(project).list_jobs() == [] and host.list() == []


def test_the_job_lifecycle_through_every_handler(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    store = FirestoreStore(project)
    call("submit_job", "submit", SPEC)
    call("on_vm_booted", "vm_booted", vm_event(VmBooted, zone="us-central1-a", instance_id="123"))
    assert store.get_job("job1").substatus == JobSubstatus.GEARING_UP_ENV  # type: ignore[union-attr]
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING"), message_id="2")
    instance = store.get_instance("sl-job1-a1")
    assert instance is not None and instance.status == InstanceStatus.EXECUTING
    assert instance.booted_at is not None and instance.instance_id  # the VM id from insert
    epoch = vm_event(EpochDone, epoch=1, epochs=3, step=45, metrics={"val_acc": 0.9})
    for message_id in ("3", "3", "4"):  # redelivered, then published twice
        assert call("on_epoch_done", "epoch_done", epoch, message_id=message_id).status_code == 200
    job = store.get_job("job1")
    assert job is not None and (job.progress, job.step, job.metrics) == (
        "1/3",
        45,
        {"val_acc": 0.9},
    )
    assert [e.epoch for e in store.list_epochs("job1")] == [1]
    finished = vm_event(JobFinished, exit_code=0)
    for _ in range(2):
        assert call("on_job_finished", "job_finished", finished, message_id="5").status_code == 200
    job = store.get_job("job1")
    assert job is not None and job.status == JobStatus.COMPLETED
    assert [h.substatus for h in job.history] == [
        "REQUESTING_SERVER",
        "CONNECTING_SERVER",
        "GEARING_UP_ENV",
        "TRAINING",
        "RETURNING",
        "COMPLETED",
    ]
    instance = store.get_instance("sl-job1-a1")
    assert instance is not None and (instance.status, instance.substatus) == (
        "CLOSED",
        "TERMINATED",
    )
    assert instance.cost_usd >= 0 and host.list() == []


def test_late_and_stale_events_are_ignored(call: Callable[..., Any], project: str) -> None:
    store = FirestoreStore(project)
    call("submit_job", "submit", SPEC)
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING"), message_id="2")
    call("on_vm_booted", "vm_booted", vm_event(VmBooted), message_id="3")  # late
    call(
        "on_vm_booted",
        "vm_booted",
        vm_event(VmBooted, attempt=2, instance="sl-job1-a2"),
        message_id="4",
    )  # another attempt's VM
    job = store.get_job("job1")
    assert job is not None and job.substatus == JobSubstatus.TRAINING


def test_a_failed_trainer_fails_the_job_with_its_output(
    call: Callable[..., Any], project: str
) -> None:
    call("submit_job", "submit", SPEC)
    finished = vm_event(JobFinished, exit_code=3, log_tail="ValueError: bad learning rate\n")
    call("on_job_finished", "job_finished", finished, message_id="2")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.status == JobStatus.FAILED
    assert job.error is not None and "exited with code 3" in job.error
    assert "bad learning rate" in job.error


def test_no_capacity_queues_then_the_reaper_gives_up(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    host.capacity_errors.update(
        {
            "us-central1-a": "ZONE_RESOURCE_POOL_EXHAUSTED",
            "us-central1-b": "ZONE_RESOURCE_POOL_EXHAUSTED",
        }
    )
    call("submit_job", "submit", {**SPEC, "wait_request_s": 0})
    store = FirestoreStore(project)
    job = store.get_job("job1")
    assert job is not None and job.substatus == JobSubstatus.WAITING_FOR_CAPACITY
    entry = store.get_queue("job1")
    assert entry is not None and entry.reason == "no-capacity"
    assert (
        entry.last_error is not None and "n1-standard-8-t4.od in us-central1-b" in entry.last_error
    )
    store.put_queue(entry.model_copy(update={"not_before": datetime.now(UTC)}))
    call("reaper", "reaper_tick", ReaperTick(), message_id="tick")
    job = store.get_job("job1")
    assert job is not None and job.status == JobStatus.CANCELED
    assert job.error is not None and "wait_request_s=0" in job.error
    assert store.get_queue("job1") is None and host.list() == []


def test_the_reaper_places_a_queued_job_once_capacity_returns(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    host.capacity_errors.update(
        {
            "us-central1-a": "ZONE_RESOURCE_POOL_EXHAUSTED",
            "us-central1-b": "ZONE_RESOURCE_POOL_EXHAUSTED",
        }
    )
    call("submit_job", "submit", SPEC)
    host.capacity_errors.clear()
    store = FirestoreStore(project)
    entry = store.get_queue("job1")
    assert entry is not None
    store.put_queue(entry.model_copy(update={"not_before": datetime.now(UTC)}))
    call("reaper", "reaper_tick", ReaperTick(), message_id="tick")
    job = store.get_job("job1")
    assert job is not None and job.substatus == JobSubstatus.CONNECTING_SERVER
    assert store.get_queue("job1") is None and len(host.list()) == 1


def test_an_unavailable_dependency_asks_for_redelivery(
    call: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_COMPUTE_ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    deps.reset()
    assert call("submit_job", "submit", SPEC).status_code == 500


def test_a_too_old_message_is_dropped(call: Callable[..., Any], project: str) -> None:
    old = datetime.now(UTC) - timedelta(days=2)
    assert call("submit_job", "submit", SPEC, published=old).status_code == 200
    assert FirestoreStore(project).list_jobs() == []


def test_placement_records_availability_for_spotline_machines(
    call: Callable[..., Any], host: LocalCloud, project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    host.capacity_errors.update({"us-central1-a": "ZONE_RESOURCE_POOL_EXHAUSTED"})
    call("submit_job", "submit", SPEC)  # g2-standard-4: us-central1-a fails, us-central1-b succeeds
    since = datetime.now(UTC) - timedelta(hours=1)
    assert FirestoreStore(project).availability("g2-standard-4", since) == (2, 1)
    assert FirestoreStore(project).availability("g2-standard-4.od", since) == (0, 0)
    FirestoreStore(project).seed_machines(load_catalog())
    assert cli(["machines"]) == 0
    shown = capsys.readouterr().out
    row = next(line for line in shown.splitlines() if line.startswith("g2-standard-4 "))
    assert "1x nvidia-l4".replace(" ", "") in row and "50% of 2" in row and " 1 " in row


def test_a_finished_job_shows_its_last_epoch_even_if_that_event_is_late(
    call: Callable[..., Any], project: str
) -> None:
    call("submit_job", "submit", SPEC)
    last = vm_event(EpochDone, epoch=3, epochs=3, step=135, metrics={"val_acc": 0.97})
    finished = vm_event(JobFinished, exit_code=0, last_epoch=last)
    call("on_job_finished", "job_finished", finished, message_id="f")  # before the epoch event
    store = FirestoreStore(project)
    job = store.get_job("job1")
    assert job is not None and job.status == JobStatus.COMPLETED
    assert (job.progress, job.metrics) == ("3/3", {"val_acc": 0.97})
    assert [e.epoch for e in store.list_epochs("job1")] == [3]
    call("on_epoch_done", "epoch_done", last, message_id="late")  # then it comes: no change
    assert store.get_job("job1") == job
