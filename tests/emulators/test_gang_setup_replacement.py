"""A gang that loses a node while it sets up, through the real handlers with
the local cloud's VMs: one VM replaces the lost node (its own event token,
on the attempt's record), the others keep their VMs, and the gang regroups
as soon as the replacement is up (nothing was trained: no save to wait for),
then goes on setting up; unless an epoch shows it was training after all."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.contract.cluster import gang_port
from spotline.shared.contract.events import EpochDone, Heartbeat, JobFinished, VmBooted
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.vms import REGROUP_METADATA_KEY, RESTORE_METADATA_KEY
from tests.conftest import SPEC
from tests.emulators.test_gang_replacement import (
    GANG,
    N0,
    N1,
    R0,
    R1,
    boot,
    gang_stop,
    job_of,
    metadata,
    names,
    preempt,
    wire,
)
from tests.emulators.test_gangs import node
from tests.emulators.test_recovery import log_sink_entry
from tests.event_tokens import vm_token

pytestmark = pytest.mark.emulators
S = JobSubstatus


def installing_gang(call: Callable[..., Any], project: str) -> None:
    """Both nodes booted and installing requirements: no trainer runs yet."""
    call("submit_job", "submit", GANG, message_id="s1")
    for name in (N0, N1):
        booted = node(VmBooted, name, zone="us-central1-a")
        call("on_vm_booted", "vm_booted", booted, message_id=f"b-{name}")
        beat = node(Heartbeat, name, phase="INSTALLING_REQUIREMENTS")
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")
    assert job_of(project).substatus == S.INSTALLING_REQUIREMENTS


def test_a_worker_lost_while_the_gang_installs_is_replaced_and_the_gang_sets_up_on(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    installing_gang(call, project)
    start = len(host.requests)
    preempt(call, N1)  # its agent's report: no step, it never trained
    assert sorted(wire(host, start)) == [f"delete {N1}", f"insert {R1}"]
    assert names(host) == [N0, R1]
    job = job_of(project)
    assert (job.substatus, job.attempt, job.nodes, job.preemptions) == (
        S.REPLACING_NODE,
        1,
        [N0, R1],
        1,
    )
    assert metadata(host, R1)[RESTORE_METADATA_KEY] == "wait"
    assert vm_token(host, R1) not in ("", vm_token(host, N0))  # its own token
    boot(call, R1)
    job = job_of(project)
    # Regrouped at once (nothing to save), back to installing on the same attempt.
    assert (job.status, job.substatus, job.attempt, job.replacing) == (
        JobStatus.QUEUING,
        S.INSTALLING_REQUIREMENTS,
        1,
        None,
    )
    for name in (N0, R1):
        told = json.loads(metadata(host, name)[REGROUP_METADATA_KEY])
        assert (told["generation"], told["nodes"]) == (1, [N0, R1])
        assert told["master_port"] == gang_port("job1", 1, 1)
    assert metadata(host, R1)[RESTORE_METADATA_KEY] == "go"
    [swap] = job.attempts[0].replaced_nodes
    assert (swap.lost, swap.replacement) == (N1, R1)
    beat = node(Heartbeat, R1, phase="TRAINING", step=0)
    assert call("on_epoch_done", "epoch_done", beat, message_id="h-r1").status_code == 200
    assert job_of(project).substatus == S.TRAINING
    done = node(JobFinished, N0, exit_code=0)
    call("on_job_finished", "job_finished", done, message_id="f0")
    assert job_of(project).status == JobStatus.COMPLETED


def test_node_zero_lost_while_setting_up_regroups_without_waiting_out_its_notice(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    installing_gang(call, project)
    call("on_spot_preempted", "spot_preempted", log_sink_entry(host, N0), message_id="ls")
    assert job_of(project).nodes == [R0, N1]
    boot(call, R0)
    job = job_of(project)
    assert (job.substatus, job.instance, job.replacing) == (S.INSTALLING_REQUIREMENTS, R0, None)
    assert json.loads(metadata(host, N1)[REGROUP_METADATA_KEY])["nodes"] == [R0, N1]


def test_an_epoch_heard_after_the_loss_makes_the_regroup_wait_for_node_zeros_save(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The gang's training reports were late: it was training when N1 went,
    so its ranks stopped together and node 0 saves; the regroup waits for it."""
    installing_gang(call, project)
    preempt(call, N1)
    report = node(EpochDone, N0, epoch=1, epochs=SPEC["epochs"], step=10, metrics={})
    assert call("on_epoch_done", "epoch_done", report, message_id="e1").status_code == 200
    boot(call, R1)
    assert job_of(project).substatus == S.REPLACING_NODE
    assert REGROUP_METADATA_KEY not in metadata(host, N0)
    gang_stop(call, N0, 12)
    job = job_of(project)
    assert (job.substatus, job.replacing, job.attempts[0].checkpoint_step) == (
        S.TRAINING,
        None,
        12,
    )


def test_a_node_lost_before_its_trainer_started_regroups_at_once_though_the_job_trains(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """Node 0's trainer started (the job reads TRAINING), node 1's never did:
    no step was taken, node 0's ranks wait in their rendezvous with node 1,
    and no save of theirs will come. Before, the regroup waited for one until
    the bound, then relaunched the whole gang."""
    installing_gang(call, project)
    beat = node(Heartbeat, N0, phase="TRAINING")
    call("on_epoch_done", "epoch_done", beat, message_id="h-n0-training")
    assert job_of(project).substatus == S.TRAINING
    preempt(call, N1)
    boot(call, R1)
    job = job_of(project)
    assert (job.substatus, job.attempt, job.nodes, job.replacing) == (S.TRAINING, 1, [N0, R1], None)
    assert json.loads(metadata(host, N0)[REGROUP_METADATA_KEY])["nodes"] == [N0, R1]
