"""A gang loses one node, not its attempt, through the real handlers with the
local cloud's VMs: one VM replaces the lost node (inserted before the lost
VM's delete), the others keep their VMs, and the gang regroups once the
replacement is up and node 0's save is complete; every other order of events
ends defined (``spotline.shared.domain.node_replacement``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.cluster import gang_port
from spotline.shared.contract.events import (
    Heartbeat,
    JobFinished,
    ReaperTick,
    SpotPreempted,
    VmBooted,
)
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from spotline.shared.domain.vms import (
    JOB_METADATA_KEY,
    REGROUP_METADATA_KEY,
    RESTORE_METADATA_KEY,
)
from tests.conftest import SPEC
from tests.emulators.test_gangs import node
from tests.emulators.test_recovery import log_sink_entry

pytestmark = pytest.mark.emulators
GANG = {**SPEC, "nodes": 2}
N0, N1 = "sl-job1-a1-n0", "sl-job1-a1-n1"
R1, R0 = "sl-job1-a1-n1-g1", "sl-job1-a1-n0-g1"


def job_of(project: str) -> JobDoc:
    job = FirestoreStore(project).get_job("job1")
    assert job is not None
    return job


def names(host: LocalCloud) -> list[str]:
    return sorted(vm["name"] for vm in host.list())


def metadata(host: LocalCloud, name: str) -> dict[str, str]:
    vm = host.get(name)
    assert vm is not None, f"no VM {name}"
    return dict(vm["metadata"])


def wire(host: LocalCloud, start: int) -> list[str]:
    """Inserts and deletes on the wire since request ``start``, with the VM named."""
    seen = []
    for r in host.requests[start:]:
        if r.method == "DELETE" and "/instances/" in r.path:
            seen.append(f"delete {r.path.rsplit('/', 1)[-1]}")
        elif r.method == "POST" and r.path.endswith("/instances"):
            seen.append(f"insert {r.body['name']}")
        elif r.path.endswith("/bulkInsert"):
            seen.append("bulk insert")
    return seen


def training_gang(call: Callable[..., Any], spec: dict[str, Any] | None = None) -> None:
    call("submit_job", "submit", spec or GANG, message_id="s1")
    for name in (N0, N1):
        beat = node(Heartbeat, name, phase="TRAINING", step=10)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")


def preempt(call: Callable[..., Any], name: str, step: int | None = None, mid: str = "p1") -> Any:
    notice = node(SpotPreempted, name, step=step)
    return call("on_spot_preempted", "spot_preempted", notice, message_id=mid)


def gang_stop(call: Callable[..., Any], name: str, step: int | None, mid: str = "g0") -> None:
    stop = node(SpotPreempted, name, step=step, gang_stop=True)
    assert call("on_spot_preempted", "spot_preempted", stop, message_id=mid).status_code == 200


def boot(call: Callable[..., Any], name: str, mid: str = "b1") -> None:
    booted = node(VmBooted, name, zone="us-central1-a")
    assert call("on_vm_booted", "vm_booted", booted, message_id=mid).status_code == 200


def test_a_workers_loss_inserts_one_replacement_before_the_lost_vms_delete(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    start = len(host.requests)
    for _ in range(2):  # redelivered: the same one replacement
        preempt(call, N1, step=40)
    # (The redelivery deletes the lost VM again: a delete of a missing VM succeeds.)
    assert sorted(set(wire(host, start))) == [f"delete {N1}", f"insert {R1}"]
    assert wire(host, start)[:2] == [f"insert {R1}", f"delete {N1}"]
    assert names(host) == [N0, R1]
    job = job_of(project)
    assert (job.status, job.substatus, job.attempt, job.preemptions) == (
        JobStatus.RECOVERING,
        JobSubstatus.REPLACING_NODE,
        1,
        1,
    )
    assert job.nodes == [N0, R1] and job.attempts[0].checkpoint_step == 40
    # The replacement: the lost node's rank and zone, the gang's new list, its trainer
    # waiting for the regroup.
    made = metadata(host, R1)
    assignment = Assignment.model_validate_json(made[JOB_METADATA_KEY])
    assert (assignment.nodes, assignment.attempt, assignment.generation) == ([N0, R1], 1, 1)
    assert assignment.master_port == gang_port("job1", 1, 1)
    assert made[RESTORE_METADATA_KEY] == "wait"
    # It carries the gang's network tag: the attempt's firewall rule lets only
    # VMs with that tag reach the survivors.
    [insert] = [r for r in host.requests[start:] if r.path.endswith("/instances")]
    assert insert.body["tags"] == {"items": ["sl-job1-a1"]}
    assert host.get(R1)["zone"] == host.get(N0)["zone"]  # type: ignore[index]
    store = FirestoreStore(project)
    lost, kept, new = (store.get_instance(n) for n in (N1, N0, R1))
    assert lost is not None and lost.status == InstanceStatus.CLOSED
    assert kept is not None and kept.status in InstanceStatus.live()
    assert new is not None and (new.attempt, new.job_id) == (1, "job1")
    user = store.get_user("alice")
    assert user is not None and sorted(user.active_instances) == [N0, R1]


@pytest.mark.parametrize("order", ["boot-first", "stop-first"])
def test_the_gang_regroups_once_the_replacement_is_up_and_node_zero_saved(
    call: Callable[..., Any], host: LocalCloud, project: str, order: str
) -> None:
    training_gang(call)
    if order == "stop-first":  # node 0's stop report overtakes the noticed node's
        gang_stop(call, N0, 40)
    preempt(call, N1)
    if order == "boot-first":
        boot(call, R1)
        assert REGROUP_METADATA_KEY not in metadata(host, N0)
        assert job_of(project).substatus == JobSubstatus.REPLACING_NODE
        gang_stop(call, N0, 40)
    else:
        boot(call, R1)
    job = job_of(project)
    assert (job.status, job.substatus, job.attempt, job.replacing) == (
        JobStatus.TRAINING,
        JobSubstatus.TRAINING,
        1,
        None,
    )
    for name in (N0, R1):
        told = json.loads(metadata(host, name)[REGROUP_METADATA_KEY])
        assert told == {
            "generation": 1,
            "nodes": [N0, R1],
            "hosts": ["127.0.0.1", "127.0.0.1"],
            "master_port": gang_port("job1", 1, 1),
        }
    assert metadata(host, R1)[RESTORE_METADATA_KEY] == "go"
    assert names(host) == [N0, R1]
    # The replacement's events are the attempt's; the gang trains on and ends with node 0.
    beat = node(Heartbeat, R1, phase="TRAINING", step=41)
    assert call("on_epoch_done", "epoch_done", beat, message_id="h-r1").status_code == 200
    done = node(JobFinished, N0, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f0")
    assert job_of(project).status == JobStatus.COMPLETED
    waited = job_of(project).phase_seconds
    assert "waiting_for_node" in waited


def test_a_late_report_of_the_lost_node_changes_nothing(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    sink = log_sink_entry(host, N1)  # read while the VM is there: it names its id
    preempt(call, N1)
    start = len(host.requests)
    assert preempt(call, N1, step=7, mid="p-late").status_code == 200  # acknowledged as stale
    call("on_spot_preempted", "spot_preempted", sink, message_id="ls")
    assert not [w for w in wire(host, start) if w != f"delete {N1}"]
    job = job_of(project)
    assert (job.substatus, job.nodes, job.attempt) == (JobSubstatus.REPLACING_NODE, [N0, R1], 1)
    assert job.attempts[0].checkpoint_step == 7  # the step it saved is kept


def test_a_second_nodes_loss_while_replacing_relaunches_the_whole_gang(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    preempt(call, N1)
    start = len(host.requests)
    preempt(call, N0, mid="p0")
    job = job_of(project)
    assert (job.attempt, job.preemptions, job.replacing) == (2, 2, None)
    assert names(host) == ["sl-job1-a2-n0", "sl-job1-a2-n1"]
    assert sorted(w for w in wire(host, start) if w.startswith("delete")) == [
        f"delete {N0}",
        f"delete {R1}",
    ]


def test_a_survivors_crash_while_replacing_relaunches_without_failing(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    preempt(call, N1)
    crashed = node(JobFinished, N0, exit_code=1, log_tail="peer gone\n")
    call("on_job_finished", "job_finished", crashed, message_id="f0")
    job = job_of(project)
    assert (job.status, job.attempt, job.preemptions, job.error) == (
        JobStatus.RECOVERING,
        2,
        1,
        None,
    )
    assert names(host) == ["sl-job1-a2-n0", "sl-job1-a2-n1"]


def test_no_regroup_within_the_bound_relaunches_the_whole_gang(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call, {**GANG, "replace_node_timeout_s": 120})
    preempt(call, N1)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert job_of(project).substatus == JobSubstatus.REPLACING_NODE  # within the bound
    backdate_loss(project, 121)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t2")
    job = job_of(project)
    assert (job.attempt, job.preemptions, job.replacing) == (2, 1, None)
    assert any("did not regroup within 120 s" in h.note for h in job.history)
    assert names(host) == ["sl-job1-a2-n0", "sl-job1-a2-n1"]


def test_a_lost_node_zero_regroups_with_the_replacement_as_the_head(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    preempt(call, N0, step=40)  # its agent's report: saved
    assert names(host) == [R0, N1]
    boot(call, R0)
    job = job_of(project)
    assert (job.substatus, job.instance, job.nodes) == (JobSubstatus.TRAINING, R0, [R0, N1])
    told = json.loads(metadata(host, N1)[REGROUP_METADATA_KEY])
    assert told["nodes"] == [R0, N1]


def test_a_replacements_heartbeat_stands_for_its_lost_boot_report(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    preempt(call, N1)
    gang_stop(call, N0, 40)
    beat = node(Heartbeat, R1, phase="GEARING_UP_ENV")
    assert call("on_epoch_done", "epoch_done", beat, message_id="h-r1").status_code == 200
    assert job_of(project).substatus == JobSubstatus.TRAINING
    assert REGROUP_METADATA_KEY in metadata(host, N0)


def backdate_loss(project: str, seconds: float) -> None:
    def back(job: JobDoc) -> JobDoc:
        assert job.replacing is not None
        since = datetime.now(UTC) - timedelta(seconds=seconds)
        earlier = job.replacing.model_copy(update={"since": since})
        return job.model_copy(update={"replacing": earlier})

    FirestoreStore(project).update_job("job1", back)


def test_giving_up_a_replacement_at_max_attempts_fails_and_lets_every_node_go(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call, {**GANG, "replace_node_timeout_s": 60, "max_attempts": 1})
    preempt(call, N1)
    assert names(host) == [N0, R1]
    backdate_loss(project, 61)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    job = job_of(project)
    assert (job.status, job.attempt) == (JobStatus.FAILED, 1)
    assert job.error is not None and "max_attempts=1" in job.error
    assert names(host) == []
    user = FirestoreStore(project).get_user("alice")
    assert user is not None and user.active_instances == [] and user.active_jobs == []


def test_a_lost_node_zero_reported_by_the_log_sink_regroups_once_its_agent_saved(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The log sink's report comes at the notice's start: node 0 may still be
    saving, so the gang regroups only on its agent's report (or the notice's end)."""
    training_gang(call)
    call("on_spot_preempted", "spot_preempted", log_sink_entry(host, N0), message_id="ls")
    assert names(host) == [N0, R0, N1]  # the noticed VM kept through its notice
    boot(call, R0)
    assert job_of(project).substatus == JobSubstatus.REPLACING_NODE
    assert REGROUP_METADATA_KEY not in metadata(host, N1)
    preempt(call, N0, step=44, mid="p-agent")  # stale as a loss; its save completes the wait
    job = job_of(project)
    assert (job.substatus, job.nodes, job.attempts[0].checkpoint_step) == (
        JobSubstatus.TRAINING,
        [R0, N1],
        44,
    )
    assert json.loads(metadata(host, N1)[REGROUP_METADATA_KEY])["nodes"] == [R0, N1]
    assert names(host) == [R0, N1]  # the agent's report let the kept VM go


def test_the_attempt_record_names_the_replacement_and_finds_its_logs(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    training_gang(call)
    ids = {name: str(host.get(name)["id"]) for name in (N0, N1)}  # type: ignore[index]
    preempt(call, N1, step=40)
    made = str(host.get(R1)["id"])  # type: ignore[index]
    [record] = job_of(project).attempts
    assert record.node_names == [N0, R1] and record.node_ids == [ids[N0], made]
    [swap] = record.replaced_nodes
    assert (swap.rank, swap.lost, swap.lost_instance_id) == (1, N1, ids[N1])
    assert (swap.replacement, swap.instance_id) == (R1, made)
    for instance_id in (*ids.values(), made):
        assert f'"{instance_id}"' in (record.logs_query or "")


def test_a_late_copy_of_node_zeros_first_stop_does_not_open_the_second_regroup(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Node 0's stop for the first loss is delivered again after the gang
    regrouped; then the replacement is lost too. The second replacement's
    gate stays shut until node 0's save at the second stop: opened on the
    late copy, it would restore the first stop's older save while node 0 is
    still writing the new one."""
    training_gang(call)
    preempt(call, N1, step=40)
    stop = node(SpotPreempted, N0, step=40, gang_stop=True, generation=0)
    assert call("on_spot_preempted", "spot_preempted", stop, message_id="g0").status_code == 200
    boot(call, R1)
    assert job_of(project).substatus == JobSubstatus.TRAINING
    # Pub/Sub delivers the same message again, long after.
    assert call("on_spot_preempted", "spot_preempted", stop, message_id="g0").status_code == 200
    preempt(call, R1, step=90, mid="p2")
    r2 = "sl-job1-a1-n1-g2"
    boot(call, r2, mid="b2")
    job = job_of(project)
    assert (job.substatus, job.nodes) == (JobSubstatus.REPLACING_NODE, [N0, r2])
    assert metadata(host, r2)[RESTORE_METADATA_KEY] == "wait"
    second = node(SpotPreempted, N0, step=90, gang_stop=True, generation=1)
    assert call("on_spot_preempted", "spot_preempted", second, message_id="g1").status_code == 200
    assert job_of(project).substatus == JobSubstatus.TRAINING
    assert metadata(host, r2)[RESTORE_METADATA_KEY] == "go"
    assert json.loads(metadata(host, N0)[REGROUP_METADATA_KEY])["generation"] == 2
