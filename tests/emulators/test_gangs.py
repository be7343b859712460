"""Multi-node jobs through the handlers: one all-or-nothing gang in one zone,
node events, a gang restarted whole when any node is lost."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import (
    CancelRequest,
    Heartbeat,
    JobFinished,
    ReaperTick,
    SpotPreempted,
)
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from tests.conftest import SPEC, vm_event
from tests.event_tokens import vm_token

pytestmark = pytest.mark.emulators
GANG = {**SPEC, "nodes": 2}
N0, N1 = "sl-job1-a1-n0", "sl-job1-a1-n1"


def names(host: LocalCloud) -> list[str]:
    return sorted(vm["name"] for vm in host.list())


def deletes_and_inserts(host: LocalCloud, start: int) -> list[str]:
    """The deletes, operation waits and bulk inserts on the wire since request ``start``."""
    return [
        ("delete" if r.method == "DELETE" else "wait" if r.path.endswith("/wait") else "insert")
        for r in host.requests[start:]
        if r.method == "DELETE" or r.path.endswith(("/wait", "/bulkInsert"))
    ]


def held_since(project: str, seconds_ago: float) -> None:
    """The job's held finish (``spotline.shared.domain.gang_finish``), heard
    ``seconds_ago``: the reaper reads the real clock."""

    def back(job: JobDoc) -> JobDoc:
        assert job.held_finish is not None
        since = datetime.now(UTC) - timedelta(seconds=seconds_ago)
        held = job.held_finish.model_copy(update={"since": since})
        return job.model_copy(update={"held_finish": held})

    FirestoreStore(project).update_job("job1", back)


def node(cls: type, name: str, **fields: Any) -> Any:
    return vm_event(cls, instance=name, **fields)


def test_a_gang_is_placed_whole_in_one_zone(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    host.capacity_errors["us-central1-a"] = "ZONE_RESOURCE_POOL_EXHAUSTED"
    for _ in range(2):  # redelivered: still one gang
        call("submit_job", "submit", GANG, message_id="s1")
    assert names(host) == [N0, N1]
    assert {vm["zone"] for vm in host.list()} == {"us-central1-b"}
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and (job.instance, job.nodes) == (N0, [N0, N1])
    assert job.attempts[0].nodes == 2
    vm = host.get(N1)
    assert vm is not None
    assignment = json.loads(vm["metadata"]["spotline-job"])
    assert assignment["nodes"] == [N0, N1] and assignment["hosts"] == ["127.0.0.1"] * 2
    assert assignment["master_port"] > 0
    assert {i.name for i in FirestoreStore(project).list_instances()} == {N0, N1}
    # Every node holds the attempt's event token (one bulk insert, one token).
    assert vm_token(host, N0) == vm_token(host, N1) != ""


def test_no_zone_for_the_whole_gang_waits(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    host.capacity_errors.update(
        {
            "us-central1-a": "ZONE_RESOURCE_POOL_EXHAUSTED",
            "us-central1-b": "ZONE_RESOURCE_POOL_EXHAUSTED",
        }
    )
    call("submit_job", "submit", GANG, message_id="s1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.substatus == JobSubstatus.WAITING_FOR_CAPACITY
    assert host.list() == []


def test_the_job_ends_with_node_zero(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", GANG, message_id="s1")
    call("on_epoch_done", "epoch_done", node(Heartbeat, N1, phase="TRAINING"), message_id="h1")
    call("on_job_finished", "job_finished", node(JobFinished, N1, exit_code=0), message_id="f1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.status == JobStatus.TRAINING
    assert names(host) == [N0]  # the worker's VM is released
    call("on_job_finished", "job_finished", node(JobFinished, N0, exit_code=0), message_id="f0")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.status == JobStatus.COMPLETED
    assert host.list() == []


def test_a_failed_worker_fails_the_job(call: Callable[..., Any], project: str) -> None:
    call("submit_job", "submit", GANG, message_id="s1")
    call("on_job_finished", "job_finished", node(JobFinished, N1, exit_code=1), message_id="f1")
    # Held for the notice window (another node's preemption would explain it:
    # tests/emulators/test_gang_finish.py), then judged by the reaper.
    held_since(project, 300)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.status == JobStatus.FAILED
    assert job.error is not None and N1 in job.error


def test_with_replacement_off_losing_any_node_restarts_the_whole_gang(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", {**GANG, "replace_node_timeout_s": 0}, message_id="s1")
    call("on_epoch_done", "epoch_done", node(Heartbeat, N0, phase="TRAINING"), message_id="h0")
    notice = node(SpotPreempted, N1)
    call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and (job.attempt, job.preemptions) == (2, 1)
    assert job.nodes == ["sl-job1-a2-n0", "sl-job1-a2-n1"]
    assert names(host) == ["sl-job1-a2-n0", "sl-job1-a2-n1"]  # both old nodes gone


def test_a_lost_gang_is_replaced_then_deleted_together(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Compute Engine takes tens of seconds to delete a running VM (its guest
    gets up to 30 s to shut down): deleted one after another, each delete
    waited for before the next was sent, a gang of 3 waited for 3 of them in a
    row; then for all 3 together before its replacement was asked for. Now
    the replacement is asked for first, then the deletes all sent together.
    (A gang that replaces no node: one that does replaces the lost one alone.)"""
    spec = {**SPEC, "nodes": 3, "replace_node_timeout_s": 0}
    call("submit_job", "submit", spec, message_id="s1")
    start = len(host.requests)
    notice = node(SpotPreempted, "sl-job1-a1-n2")
    call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    seen = deletes_and_inserts(host, start)
    # The new gang first; then every delete sent, then their operations waited for.
    assert "delete" not in seen[: seen.index("insert")], seen
    after = seen[seen.index("insert") :]
    deletes_at = after.index("delete")
    assert after[deletes_at : deletes_at + 6] == ["delete"] * 3 + ["wait"] * 3, seen
    assert names(host) == [f"sl-job1-a2-n{i}" for i in range(3)]


def deleted(host: LocalCloud, start: int) -> list[str]:
    """The VMs whose delete went over the wire since request ``start``, in order."""
    return [
        r.path.rsplit("/", 1)[-1]
        for r in host.requests[start:]
        if r.method == "DELETE" and "/instances/" in r.path
    ]


def test_a_cancel_deletes_every_node_of_the_gang(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Only node 0's VM went: the other nodes trained on, billed, until the
    reaper released them."""
    call("submit_job", "submit", {**SPEC, "nodes": 3}, message_id="s1")
    start = len(host.requests)
    for _ in range(2):  # redelivered: deleted once
        call("cancel_job", "cancel", CancelRequest(job_id="job1", reason="enough"), message_id="c1")
    assert sorted(deleted(host, start)) == [f"sl-job1-a1-n{i}" for i in range(3)]
    assert host.list() == []
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.status == JobStatus.CANCELED
    closed = {i.name: i.status for i in FirestoreStore(project).list_instances()}
    assert set(closed.values()) == {InstanceStatus.CLOSED}, closed


def test_max_runtime_deletes_every_node_of_the_gang(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", {**GANG, "max_runtime_s": 1}, message_id="s1")
    for name in (N0, N1):
        beat = node(Heartbeat, name, phase="TRAINING")
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")
    store = FirestoreStore(project)
    past = datetime.now(UTC) - timedelta(seconds=5)
    store.update_job("job1", lambda job: job.model_copy(update={"created_at": past}))
    start = len(host.requests)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert sorted(deleted(host, start)) == [N0, N1]
    job = store.get_job("job1")
    assert job is not None and job.status == JobStatus.CANCELED
