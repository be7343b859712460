"""A lost attempt's VMs are deleted while the next attempt's VMs boot: the
replacement is never kept waiting for a delete (Compute Engine gives a
deleted VM's guest up to 90 s to shut down, a preempted one 30 s), and it
restores only once every old VM is gone (``spotline.shared.domain.restore_gate``).

Orders of events, through the handlers on the local cloud: deletes made slow,
a delete failing (the state a crash between the insert and the delete leaves
too), the old VM's late reports after the new attempt started, another job's
VM of the same user, a gang.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.outage import Outage
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import (
    Heartbeat,
    JobFinished,
    ReaperTick,
    SpotPreempted,
)
from spotline.shared.domain.vms import RESTORE_METADATA_KEY
from tests.conftest import SPEC, vm_event
from tests.emulators.test_recovery import log_sink_entry

pytestmark = pytest.mark.emulators
SLOW_DELETE_S = 1.5


def names(host: LocalCloud) -> list[str]:
    return sorted(vm["name"] for vm in host.list())


def gate(host: LocalCloud, name: str) -> str | None:
    """The VM's restore gate as its agent reads it (None: made with no gate)."""
    vm = host.instance("us-central1-a", name) or host.instance("us-central1-b", name)
    assert vm is not None, f"no VM {name}"
    items = {item["key"]: item["value"] for item in vm["metadata"].get("items", [])}
    return items.get(RESTORE_METADATA_KEY)


def inserted_with_gate(host: LocalCloud, name: str) -> str | None:
    """The restore gate the VM was inserted with, as the request carried it."""
    for request in host.requests_to("POST", "/instances"):
        if request.body and request.body.get("name") == name:
            items = request.body.get("metadata", {}).get("items", [])
            return {i["key"]: i["value"] for i in items}.get(RESTORE_METADATA_KEY)
    raise AssertionError(f"no insert of {name}")


def wire(host: LocalCloud, start: int) -> list[str]:
    """Inserts and deletes since request ``start``: "insert NAME" / "delete NAME"."""
    seen = []
    for request in host.requests[start:]:
        if request.method == "DELETE":
            seen.append(f"delete {request.path.rsplit('/', 1)[-1]}")
        elif request.method == "POST" and request.path.endswith("/instances"):
            seen.append(f"insert {request.body['name']}")
        elif request.path.endswith("/bulkInsert"):
            seen.append("insert gang")
    return seen


def running(
    call: Callable[..., Any], spec: dict[str, Any] | None = None, job: str = "job1"
) -> None:
    call("submit_job", "submit", {**(spec or SPEC), "job_id": job}, message_id=f"submit-{job}")
    beat = vm_event(Heartbeat, job_id=job, instance=f"sl-{job}-a1", phase="TRAINING")
    call("on_epoch_done", "epoch_done", beat, message_id=f"hb-{job}")


def test_the_replacement_is_inserted_before_the_lost_vms_slow_delete_returns(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Deletes answer SLOW_DELETE_S late: the replacement's insert went out
    before the delete was even sent (it waited for the delete before)."""
    running(call)
    outage = host.start_outage(Outage(delay_s=SLOW_DELETE_S, methods=frozenset({"DELETE"})))
    start = len(host.requests)
    notice = vm_event(SpotPreempted, step=7)
    assert call("on_spot_preempted", "spot_preempted", notice, message_id="p1").status_code == 200
    host.end_outage()
    assert outage.delayed >= 1
    assert wire(host, start)[:2] == ["insert sl-job1-a2", "delete sl-job1-a1"]
    assert names(host) == ["sl-job1-a2"]
    # Made while the old VM might still save: it waited; the delete returned: it may restore.
    assert inserted_with_gate(host, "sl-job1-a2") == "wait"
    assert gate(host, "sl-job1-a2") == "go"
    store = FirestoreStore(project)
    old = store.get_instance("sl-job1-a1")
    assert old is not None and (old.status, old.substatus) == ("CLOSED", "PREEMPTED")
    user = store.get_user("alice")
    assert user is not None and user.active_instances == ["sl-job1-a2"]


def test_a_failed_delete_leaves_the_next_attempt_placed_and_the_reaper_finishes(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The delete fails (as after a crash between the insert and the delete):
    the next attempt is placed already, waiting to restore; the old instance
    stays CLOSING, and the reaper deletes its VM and then opens the gate."""
    running(call)
    host.fail_next("DELETE", r"/sl-job1-a1$", 503, times=100)
    notice = vm_event(SpotPreempted, step=7)
    assert call("on_spot_preempted", "spot_preempted", notice, message_id="p1").status_code == 500
    store = FirestoreStore(project)
    job = store.get_job("job1")
    assert job is not None and (job.attempt, job.instance) == (2, "sl-job1-a2")
    assert names(host) == ["sl-job1-a1", "sl-job1-a2"]
    old = store.get_instance("sl-job1-a1")
    assert old is not None and old.status == "CLOSING"
    assert gate(host, "sl-job1-a2") == "wait"  # the old VM may still be saving
    user = store.get_user("alice")
    assert user is not None and sorted(user.active_instances) == ["sl-job1-a1", "sl-job1-a2"]
    host.api._faults.clear()  # the Compute API is well again
    # Redelivered: the loss is recorded already; nothing else moves.
    call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert names(host) == ["sl-job1-a2"]
    assert gate(host, "sl-job1-a2") == "go"
    job = store.get_job("job1")
    assert job is not None and (job.attempt, job.preemptions) == (2, 1)
    user = store.get_user("alice")
    assert user is not None and user.active_instances == ["sl-job1-a2"]


def test_the_old_vms_late_reports_after_the_next_attempt_started_change_nothing(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    running(call)
    call("on_spot_preempted", "spot_preempted", vm_event(SpotPreempted, step=7), message_id="p1")
    beat = vm_event(Heartbeat, attempt=2, instance="sl-job1-a2", phase="TRAINING")
    call("on_epoch_done", "epoch_done", beat, message_id="hb2")
    # The old VM's agent, still up during its delete's shutdown: its report
    # again (a new message), and its trainer's death by the shutdown.
    late = vm_event(SpotPreempted, step=9)
    call("on_spot_preempted", "spot_preempted", late, message_id="p1-late")
    died = vm_event(JobFinished, exit_code=143)
    call("on_job_finished", "job_finished", died, message_id="f1-late")
    job = FirestoreStore(project).get_job("job1")
    assert job is not None
    assert (job.status, job.attempt, job.preemptions) == ("TRAINING", 2, 1)
    assert job.attempts[0].checkpoint_step == 9  # the later save is kept on its attempt
    assert names(host) == ["sl-job1-a2"]
    assert gate(host, "sl-job1-a2") == "go"


def test_at_the_instance_quota_the_replacement_overlaps_its_own_lost_vm_only(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quota 2, two jobs of the user running: job1's replacement is placed
    while its lost VM is deleted (the user holds 3 for that overlap), and
    job2's VM is neither deleted nor counted as job1's."""
    monkeypatch.setenv("SPOTLINE_MAX_ACTIVE_INSTANCES", "2")
    deps.reset()
    running(call, job="job1")
    running(call, job="job2")
    host.start_outage(Outage(delay_s=SLOW_DELETE_S, methods=frozenset({"DELETE"})))
    start = len(host.requests)
    call("on_spot_preempted", "spot_preempted", vm_event(SpotPreempted), message_id="p1")
    host.end_outage()
    assert wire(host, start)[:2] == ["insert sl-job1-a2", "delete sl-job1-a1"]
    assert names(host) == ["sl-job1-a2", "sl-job2-a1"]
    store = FirestoreStore(project)
    user = store.get_user("alice")
    assert user is not None and sorted(user.active_instances) == ["sl-job1-a2", "sl-job2-a1"]
    # Job 2's VM gives no room: a third job waits for quota.
    call("submit_job", "submit", {**SPEC, "job_id": "job3"}, message_id="submit-job3")
    job3 = store.get_job("job3")
    assert job3 is not None and job3.substatus == "WAITING_FOR_QUOTA"
    assert names(host) == ["sl-job1-a2", "sl-job2-a1"]


# A gang relaunched whole on a loss (one that replaces a lost node keeps the others).
WHOLE_GANG = {**SPEC, "nodes": 2, "replace_node_timeout_s": 0}


def test_a_gangs_replacement_is_inserted_before_its_nodes_are_deleted(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    call("submit_job", "submit", WHOLE_GANG, message_id="s1")
    host.start_outage(Outage(delay_s=SLOW_DELETE_S, methods=frozenset({"DELETE"})))
    start = len(host.requests)
    notice = vm_event(SpotPreempted, instance="sl-job1-a1-n1", step=4)
    assert call("on_spot_preempted", "spot_preempted", notice, message_id="p1").status_code == 200
    host.end_outage()
    seen = wire(host, start)
    assert seen[0] == "insert gang", seen
    assert sorted(seen[1:3]) == ["delete sl-job1-a1-n0", "delete sl-job1-a1-n1"], seen
    assert names(host) == ["sl-job1-a2-n0", "sl-job1-a2-n1"]
    assert [gate(host, f"sl-job1-a2-n{n}") for n in (0, 1)] == ["go", "go"]


def test_a_vm_kept_through_its_notice_gates_until_its_agent_reports_or_the_notice_ends(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The log sink's report comes at the notice's start: the VM is kept to
    save, and the next attempt is placed at once, told to wait no later than
    the notice's end; the old VM's agent reports its save, its VM goes, and
    the gate opens then."""
    running(call)
    entry = log_sink_entry(host, "sl-job1-a1")
    call("on_spot_preempted", "spot_preempted", entry, message_id="l1")
    assert names(host) == ["sl-job1-a1", "sl-job1-a2"]
    shut = gate(host, "sl-job1-a2")
    assert shut is not None and shut.startswith("wait-until-")
    assert 0 < int(shut.removeprefix("wait-until-")) - time.time() <= 46
    notice = vm_event(SpotPreempted, step=7)
    call("on_spot_preempted", "spot_preempted", notice, message_id="p1")
    assert names(host) == ["sl-job1-a2"]
    assert gate(host, "sl-job1-a2") == "go"


def test_a_gang_whose_noticed_node_is_kept_waits_for_its_notice_once_the_rest_are_gone(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The log sink reports node 1 (kept to save through its notice); node 0
    is deleted. The new gang is made waiting; once node 0's delete returned
    it waits only for node 1's notice to end (before, nobody opened it: the
    agents waited their whole bound)."""
    call("submit_job", "submit", WHOLE_GANG, message_id="s1")
    entry = log_sink_entry(host, "sl-job1-a1-n1")
    call("on_spot_preempted", "spot_preempted", entry, message_id="l1")
    assert names(host) == ["sl-job1-a1-n1", "sl-job1-a2-n0", "sl-job1-a2-n1"]
    for rank in (0, 1):
        shut = gate(host, f"sl-job1-a2-n{rank}")
        assert shut is not None and shut.startswith("wait-until-"), shut


def test_a_failed_insert_still_lets_the_lost_vm_go_at_once(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The insert comes first now: when it fails (an API error to retry), the
    lost VM is still deleted in the same call, not a reaper's sweep later."""
    running(call)
    host.fail_next("POST", r"/instances$", 503, times=100)
    notice = vm_event(SpotPreempted, step=7)
    assert call("on_spot_preempted", "spot_preempted", notice, message_id="p1").status_code == 500
    assert names(host) == []
    store = FirestoreStore(project)
    old = store.get_instance("sl-job1-a1")
    assert old is not None and (old.status, old.substatus) == ("CLOSED", "PREEMPTED")
    job = store.get_job("job1")
    assert job is not None and (job.attempt, job.preemptions) == (2, 1)
    assert store.get_queue("job1") is not None  # the reaper's retry of the placement
