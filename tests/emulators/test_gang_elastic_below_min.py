"""An elastic gang whose loss leaves fewer than ``min_nodes`` of its nodes,
through the real handlers with the local cloud's VMs: the survivors stay and
wait for every replacement, then the gang grows back whole; relaunched whole
only past the bound (``spotline.shared.domain.gang_resize``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.contract.events import JobFinished, ReaperTick, SpotPreempted
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.vms import GANG_STOP_METADATA_KEY, RESTORE_METADATA_KEY
from tests.emulators.test_gang_replacement import boot, job_of, metadata, names, preempt, wire
from tests.emulators.test_gang_resize import (
    N0,
    N1,
    N2,
    R1,
    backdate,
    elastic_gang,
    gang_stop,
    regroup,
    told,
)
from tests.emulators.test_gangs import node

pytestmark = pytest.mark.emulators
S = JobSubstatus
R2 = "sl-job1-a1-n2-g3"  # node 2's replacement, named at the smaller gang's next generation


def shrunk(call: Callable[..., Any], host: LocalCloud) -> None:
    """Node 1 lost at step 38, node 0's save at 40: nodes 0 and 2 train on."""
    elastic_gang(call)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    assert told(host, N2) == regroup(2, [N0, N2])


def test_a_loss_below_min_nodes_keeps_the_survivor_which_waits_then_all_grow_back(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    shrunk(call, host)
    start = len(host.requests)
    for mid in ("p2", "p2-again"):  # redelivered: one replacement
        preempt(call, N2, mid=mid)
    job = job_of(project)
    assert (job.status, job.substatus, job.attempt, job.preemptions) == (
        JobStatus.RECOVERING,
        S.REPLACING_NODE,
        1,
        2,
    )
    assert job.nodes == [N0, R1, R2]
    assert [w for w in wire(host, start) if w.startswith(("insert", "bulk"))] == [f"insert {R2}"]
    assert N0 in names(host) and N2 not in names(host)
    assert told(host, N0) == regroup(2, [N0, N2])  # nothing new told yet
    # Node 0 saves at node 2's notice; one replacement up is not enough.
    gang_stop(call, N0, 70, generation=2, mid="g0-2")
    boot(call, R1, mid="b1")
    assert told(host, N0) == regroup(2, [N0, N2])
    assert job_of(project).substatus == S.REPLACING_NODE
    boot(call, R2, mid="b2")
    for name in (N0, R1, R2):
        assert told(host, name) == regroup(3, [N0, R1, R2])
    assert metadata(host, R2)[RESTORE_METADATA_KEY] == "go"
    assert GANG_STOP_METADATA_KEY not in metadata(host, R1)
    job = job_of(project)
    assert (job.substatus, job.replacing, job.attempt, job.resizes) == (S.TRAINING, None, 1, 2)
    assert job.attempts[0].checkpoint_step == 70
    assert names(host) == [N0, R1, R2]
    done = node(JobFinished, N0, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f0")
    assert job_of(project).status == JobStatus.COMPLETED


def test_two_nodes_noticed_at_once_the_second_heard_after_the_shrink(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Node 2's agent reports its loss after nodes 0 and 2 were told to
    shrink; it last ran at generation 0, so the smaller gang never stepped
    and the gang regroups from node 0's first save once both are up."""
    shrunk(call, host)
    lost = node(SpotPreempted, N2, step=40, generation=0)
    call("on_spot_preempted", "spot_preempted", lost, message_id="p2")
    assert job_of(project).substatus == S.REPLACING_NODE
    boot(call, R1, mid="b1")
    boot(call, R2, mid="b2")
    for name in (N0, R1, R2):
        assert told(host, name) == regroup(3, [N0, R1, R2])
    job = job_of(project)
    assert (job.substatus, job.attempt, job.preemptions) == (S.TRAINING, 1, 2)
    assert job.attempts[0].checkpoint_step == 40


def test_below_min_nodes_past_the_bound_the_reaper_relaunches_the_whole_gang(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    shrunk(call, host)
    preempt(call, N2, mid="p2")
    gang_stop(call, N0, 70, generation=2, mid="g0-2")
    backdate(project, 400)  # past replace_node_timeout_s (300)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    job = job_of(project)
    assert (job.attempt, job.preemptions, job.replacing) == (2, 2, None)
    assert names(host) == ["sl-job1-a2-n0", "sl-job1-a2-n1", "sl-job1-a2-n2"]
