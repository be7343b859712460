"""A VM that moved on to the next job is that job's: late or repeated events of
the job it served before (its end, its agent's boot, heartbeat and epoch
reports) leave it alone. Through the handlers, on the Firestore emulator, with
the local cloud's VMs (records)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import EpochDone, Heartbeat, JobFinished, ReaperTick, VmBooted
from spotline.shared.domain.documents import InstanceDoc
from spotline.shared.domain.states import InstanceStatus
from tests.conftest import SPEC, vm_event

pytestmark = pytest.mark.emulators
VM = "sl-job1-a1"
COOL = {**SPEC, "cool_down_period_s": 600}
STOP = {**SPEC, "machine_ids": ["g2-standard-4.od"], "stop_period_s": 3600}


def finish_first_job(call: Callable[..., Any], spec: dict[str, Any]) -> None:
    call("submit_job", "submit", spec, message_id="s1")
    call("on_vm_booted", "vm_booted", vm_event(VmBooted, zone="us-central1-a"), message_id="b1")
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING"), message_id="h1")
    call("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0), message_id="f1")


def job2_holds_it(store: FirestoreStore, status: InstanceStatus) -> InstanceDoc:
    instance = store.get_instance(VM)
    assert instance is not None
    assert (instance.status, instance.substatus, instance.job_id, instance.attempt) == (
        status,
        None,
        "job2",
        1,
    )
    return instance


def test_a_repeated_job_finished_leaves_the_vm_a_cooling_claim_gave_the_next_job(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    store = FirestoreStore(project)
    finish_first_job(call, COOL)
    call("submit_job", "submit", {**COOL, "job_id": "job2"}, message_id="s2")
    claimed = job2_holds_it(store, InstanceStatus.EXECUTING)
    # job1's end again (redelivered, then published twice by its agent)
    for message_id in ("f1", "f2"):
        finished = vm_event(JobFinished, exit_code=0)
        assert (
            call("on_job_finished", "job_finished", finished, message_id=message_id).status_code
            == 200
        )
    assert job2_holds_it(store, InstanceStatus.EXECUTING).history == claimed.history
    vm = host.get(VM)
    assert vm is not None and vm["state"] == "RUNNING"
    assert '"job_id":"job2"' in vm["metadata"]["spotline-job"]
    user = store.get_user("alice")
    assert user is not None and user.active_instances == [VM] and user.stopped_instances == []


def test_a_repeated_job_finished_leaves_the_vm_restarted_for_the_next_job(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    store = FirestoreStore(project)
    finish_first_job(call, STOP)
    call("submit_job", "submit", {**STOP, "job_id": "job2"}, message_id="s2")
    restarted = job2_holds_it(store, InstanceStatus.LAUNCHING)
    for message_id in ("f1", "f2"):
        finished = vm_event(JobFinished, exit_code=0)
        assert (
            call("on_job_finished", "job_finished", finished, message_id=message_id).status_code
            == 200
        )
    assert job2_holds_it(store, InstanceStatus.LAUNCHING).history == restarted.history
    vm = host.get(VM)
    assert vm is not None and vm["state"] == "RUNNING"  # neither stopped nor deleted
    user = store.get_user("alice")
    assert user is not None and user.active_instances == [VM] and user.stopped_instances == []


def test_late_reports_of_the_previous_jobs_agent_leave_the_restarted_vm_alone(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    store = FirestoreStore(project)
    finish_first_job(call, STOP)
    call("submit_job", "submit", {**STOP, "job_id": "job2"}, message_id="s2")
    restarted = job2_holds_it(store, InstanceStatus.LAUNCHING)
    late = [
        ("on_vm_booted", "vm_booted", vm_event(VmBooted, zone="us-central1-a", instance_id="9")),
        ("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING")),
        ("on_epoch_done", "epoch_done", vm_event(EpochDone, epoch=1, epochs=3, step=45)),
    ]
    for n, (target, topic, event) in enumerate(late):
        assert call(target, topic, event, message_id=f"late{n}").status_code == 200
    # Not booted, not heard from, not training: job2's VM is still coming up,
    # and its stall clock still runs from the restart.
    after = job2_holds_it(store, InstanceStatus.LAUNCHING)
    assert after == restarted


def test_a_claimed_vm_silent_since_its_previous_job_is_not_stalled(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    store = FirestoreStore(project)
    finish_first_job(call, COOL)
    # It cooled for longer than the stall timeout (300 s) since job1's last heartbeat.
    earlier = datetime.now(UTC) - timedelta(seconds=400)
    store.update_instance(
        VM,
        lambda i: i.model_copy(
            update={
                "booted_at": earlier,
                "last_heartbeat_at": earlier,
                "cooling_since": earlier,
                "segment_started_at": earlier,
            }
        ),
    )
    call("submit_job", "submit", {**COOL, "job_id": "job2"}, message_id="s2")
    job2_holds_it(store, InstanceStatus.EXECUTING)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    job2_holds_it(store, InstanceStatus.EXECUTING)
    job = store.get_job("job2")
    assert job is not None and (job.attempt, job.instance) == (1, VM)
    assert [a.outcome for a in job.attempts] == [None]
    assert host.get(VM) is not None
