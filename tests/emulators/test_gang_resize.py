"""An elastic gang (``min_nodes``) through the real handlers with the local
cloud's VMs: the survivors are told to train on at the smaller size once
node 0's save is complete, asked to stop once the replacement is up, and
the whole gang told to regroup once that stop's save is complete; the reaper
finishes each step a crashed handler left (``spotline.shared.domain.gang_resize``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.cluster import gang_port
from spotline.shared.contract.events import Heartbeat, JobFinished, ReaperTick, SpotPreempted
from spotline.shared.domain import node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.vms import (
    GANG_STOP_METADATA_KEY,
    REGROUP_METADATA_KEY,
    RESTORE_METADATA_KEY,
)
from tests.conftest import SPEC
from tests.emulators.test_gang_replacement import boot, job_of, metadata, names, preempt, wire
from tests.emulators.test_gangs import node

pytestmark = pytest.mark.emulators
ELASTIC = {**SPEC, "nodes": 3, "min_nodes": 2}
N0, N1, N2 = "sl-job1-a1-n0", "sl-job1-a1-n1", "sl-job1-a1-n2"
R1, R0 = "sl-job1-a1-n1-g1", "sl-job1-a1-n0-g1"
S = JobSubstatus


def elastic_gang(call: Callable[..., Any]) -> None:
    call("submit_job", "submit", ELASTIC, message_id="s1")
    for name in (N0, N1, N2):
        beat = node(Heartbeat, name, phase="TRAINING", step=10)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")


def gang_stop(
    call: Callable[..., Any], name: str, step: int | None, generation: int, mid: str
) -> None:
    stop = node(SpotPreempted, name, step=step, gang_stop=True, generation=generation)
    assert call("on_spot_preempted", "spot_preempted", stop, message_id=mid).status_code == 200


def told(host: LocalCloud, name: str) -> dict[str, Any] | None:
    raw = metadata(host, name).get(REGROUP_METADATA_KEY)
    return None if raw is None else dict(json.loads(raw))


def regroup(generation: int, nodes: list[str]) -> dict[str, Any]:
    return {
        "generation": generation,
        "nodes": nodes,
        "hosts": ["127.0.0.1"] * len(nodes),
        "master_port": gang_port("job1", 1, generation),
    }


def test_an_elastic_gang_trains_on_at_two_then_grows_back_to_three(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    elastic_gang(call)
    start = len(host.requests)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    # 1. Node 0's save is complete, the replacement not up: the other two train on.
    for name in (N0, N2):
        assert told(host, name) == regroup(2, [N0, N2])
    assert told(host, R1) is None and metadata(host, R1)[RESTORE_METADATA_KEY] == "wait"
    job = job_of(project)
    assert (job.status, job.substatus, job.attempt, job.resizes) == (
        JobStatus.TRAINING,
        S.TRAINING,
        1,
        1,
    )
    # 2. The replacement is up: the smaller gang is asked to stop, and the job waits.
    boot(call, R1)
    for name in (N0, N2):
        assert metadata(host, name)[GANG_STOP_METADATA_KEY] == "2"
    assert GANG_STOP_METADATA_KEY not in metadata(host, R1)
    assert job_of(project).substatus == S.REPLACING_NODE
    # 3. A late copy of node 0's first stop, and node 2's stop: not the save to wait for.
    gang_stop(call, N0, 40, generation=0, mid="g0-late")
    gang_stop(call, N2, None, generation=2, mid="g2")
    assert told(host, N0) == regroup(2, [N0, N2])
    # 4. Node 0's stop at the smaller size: the whole gang regroups from its save.
    gang_stop(call, N0, 75, generation=2, mid="g0-2")
    for name in (N0, R1, N2):
        assert told(host, name) == regroup(3, [N0, R1, N2])
    assert metadata(host, R1)[RESTORE_METADATA_KEY] == "go"
    job = job_of(project)
    assert (job.substatus, job.replacing, job.resizes, job.gang_generation) == (
        S.TRAINING,
        None,
        2,
        3,
    )
    assert (job.attempt, job.preemptions, job.attempts[0].checkpoint_step) == (1, 1, 75)
    assert [w for w in wire(host, start) if w.startswith("insert")] == [f"insert {R1}"]
    assert names(host) == [N0, R1, N2]
    done = node(JobFinished, N0, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f0")
    assert job_of(project).status == JobStatus.COMPLETED


def test_the_reaper_finishes_a_shrink_and_a_grow_that_their_handlers_left(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Each handler died after writing the job, before telling the nodes: the
    reaper's next sweep tells them, then records it."""
    elastic_gang(call)
    preempt(call, N1, step=38)
    store = FirestoreStore(project)
    store.update_job("job1", lambda job: node_replacement.stopped(job, N0, 1, 40, None, 0))
    assert told(host, N0) is None
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert told(host, N2) == regroup(2, [N0, N2])
    assert job_of(project).resizes == 1
    store.update_job("job1", lambda job: node_replacement.booted(job, R1, 1))
    call("reaper", "reaper_tick", ReaperTick(), message_id="t2")
    assert metadata(host, N2)[GANG_STOP_METADATA_KEY] == "2"
    assert job_of(project).substatus == S.REPLACING_NODE
    call("reaper", "reaper_tick", ReaperTick(), message_id="t3")  # nothing more to do yet
    assert job_of(project).substatus == S.REPLACING_NODE


def test_a_lost_node_zeros_smaller_gang_ends_the_job_with_node_one_and_lets_every_vm_go(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    elastic_gang(call)
    preempt(call, N0, step=40)  # its agent's report: saved
    assert told(host, N1) == regroup(2, [N1, N2])
    assert told(host, N2) == regroup(2, [N1, N2])
    worker = node(JobFinished, N2, exit_code=0)
    call("on_job_finished", "job_finished", worker, message_id="f2")
    assert job_of(project).status == JobStatus.TRAINING
    done = node(JobFinished, N1, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f1")
    assert job_of(project).status == JobStatus.COMPLETED
    assert R0 not in names(host)


def test_the_smaller_gangs_last_nodes_lost_relaunch_the_whole_gang(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    elastic_gang(call)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    preempt(call, N2, mid="p2")  # below min_nodes: node 0 waits
    assert job_of(project).attempt == 1
    preempt(call, N0, mid="p0")  # no survivor left
    job = job_of(project)
    assert (job.attempt, job.preemptions, job.replacing, job.resizes) == (2, 3, None, 1)
    assert names(host) == ["sl-job1-a2-n0", "sl-job1-a2-n1", "sl-job1-a2-n2"]


def test_with_no_capacity_the_smaller_gang_trains_and_the_replacement_is_asked_for_at_intervals(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The bound does not run while the smaller gang trains: the reaper asks
    for the replacement again REINSERT_AFTER_S after each refusal (not at each
    sweep: each try writes an event token on the job), until it is placed."""
    elastic_gang(call)
    host.capacity_errors["us-central1-a"] = "ZONE_RESOURCE_POOL_EXHAUSTED"
    start = len(host.requests)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    assert told(host, N2) == regroup(2, [N0, N2]) and R1 not in names(host)
    backdate(project, 400)  # past replace_node_timeout_s (300): still training at 2
    for tick in ("t1", "t2"):
        call("reaper", "reaper_tick", ReaperTick(), message_id=tick)
    tries = [w for w in wire(host, start) if w == f"insert {R1}"]
    assert len(tries) == 2  # the loss's, and the first sweep's; the second waits
    job = job_of(project)
    assert (job.attempt, job.substatus, job.resizes) == (1, S.TRAINING, 1)
    del host.capacity_errors["us-central1-a"]
    backdate(project, 400)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t3")
    assert R1 in names(host)
    assert metadata(host, R1)[RESTORE_METADATA_KEY] == "wait"


def backdate(project: str, seconds: float) -> None:
    """The loss, and the last refused insert, ``seconds`` ago."""

    def back(job: JobDoc) -> JobDoc:
        assert job.replacing is not None
        then = datetime.now(UTC) - timedelta(seconds=seconds)
        earlier = job.replacing.model_copy(update={"since": then, "refused_at": then})
        return job.model_copy(update={"replacing": earlier})

    FirestoreStore(project).update_job("job1", back)
