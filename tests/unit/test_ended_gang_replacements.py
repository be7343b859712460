"""A gang's job that ended while it was replacing nodes: the replacement
VMs it was making are the reaper's to delete once nothing records them
(``spotline.shared.domain.reaping.orphaned``). Pure: no emulator."""

from __future__ import annotations

from spotline.shared.domain import reaping
from spotline.shared.domain.states import JobStatus
from spotline.shared.domain.vms import Vm, VmState
from tests.unit.test_further_losses import waiting_gang
from tests.unit.test_node_replacement import N2, R1, at, lose


def replacement_vm(name: str) -> Vm:
    labels = {"spotline": "true", reaping.JOB_LABEL: "job1", reaping.ATTEMPT_LABEL: "1"}
    return Vm(name, "us-central1-a", VmState.RUNNING, labels)


def test_a_replacement_made_before_a_second_loss_failed_the_job_is_an_orphan() -> None:
    """max_preemptions=1: node 1's loss is replaced, node 2's ends the job.
    The replacement's insert landed but its function died before writing its
    instance: no step of the ended job will record it, so it is deleted."""
    job = lose(waiting_gang(max_preemptions=1), N2, seconds=20)
    assert job.status == JobStatus.FAILED
    # Once the attempt's notice is over (its VMs may save through it).
    assert not reaping.orphaned(replacement_vm(R1), None, job, at(30))
    assert reaping.orphaned(replacement_vm(R1), None, job, at(70))
    actions = reaping.decide_vms([], [], [replacement_vm(R1)], {"job1": job}, _Limits(), at(70))
    assert actions == [reaping.DeleteOrphan(replacement_vm(R1))]


def test_a_waiting_gangs_replacement_not_recorded_yet_is_no_orphan() -> None:
    job = waiting_gang()
    assert not reaping.orphaned(replacement_vm(R1), None, job, at(30))


class _Limits:
    stall_timeout_s = 300.0
    boot_timeout_s = 600.0
    request_timeout_s = 120.0
    cost_refresh_s = 300.0
