"""The restore gate a regroup writes is opened even when the earlier
attempt's last VM goes while the regroup is being told: through the real
handlers, the reaper's delete running between the regroup's read of the
instances and its write of the job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.contract.events import (
    Heartbeat,
    JobFinished,
    ReaperTick,
    SpotPreempted,
    VmBooted,
)
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.vms import RESTORE_METADATA_KEY, RESTORE_WAIT
from spotline.shared.ports.compute import Compute
from tests.emulators.test_gang_replacement import (
    N0,
    N1,
    job_of,
    metadata,
    names,
    preempt,
    training_gang,
)
from tests.emulators.test_gangs import node

pytestmark = pytest.mark.emulators
S = JobSubstatus

A2N0, A2N1 = "sl-job1-a2-n0", "sl-job1-a2-n1"
A2R1 = "sl-job1-a2-n1-g1"


class ReaperMidTell:
    """The local cloud's Compute, through which the reaper's tick runs in
    full just before the first regroup told with a closed gate lands (as
    when its answer is slow): the reaper deletes the old VMs and tells the
    regroup again, its gate open now; then the first one's stale "wait"
    lands."""

    def __init__(self, inner: Compute, tick: Callable[[], Any]) -> None:
        self.inner, self.tick, self.fired = inner, tick, False

    def set_metadata(self, zone: str, name: str, items: dict[str, str], *args: Any) -> None:
        if not self.fired and items.get(RESTORE_METADATA_KEY) == RESTORE_WAIT:
            self.fired = True
            self.tick()
        self.inner.set_metadata(zone, name, items, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def boot(call: Callable[..., Any], name: str) -> None:
    """``name``, a VM of attempt 2, reports its agent up."""
    booted = node(VmBooted, name, attempt=2, zone="us-central1-a")
    assert call("on_vm_booted", "vm_booted", booted, message_id=f"b-{name}").status_code == 200


def test_the_old_attempts_vm_gone_while_the_regroup_is_told_still_opens_its_gate(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 2 is placed while attempt 1's deletes fail: its nodes wait to
    restore. One of them is lost as the gang sets up and is replaced. Its
    replacement boots: the regroup reads the old VMs still there (the gate
    "wait") and tells the nodes, slowly; meanwhile the reaper deletes the old
    VMs and tells the regroup again with the gate open, and the first
    regroup's "wait" lands last. Before, nobody opened the gate then: the
    nodes waited out the agent's bound (3 min)."""
    training_gang(call)
    host.fail_next("DELETE", r"/sl-job1-a1-n", 503, times=100)
    preempt(call, N1)
    crashed = node(JobFinished, N0, exit_code=1, log_tail="peer gone\n")
    call("on_job_finished", "job_finished", crashed, message_id="f0")
    assert job_of(project).attempt == 2
    old = [name for name in names(host) if "-a1-" in name]
    assert N0 in old and N1 in old  # the old deletes failed
    for name in (A2N0, A2N1):
        boot(call, name)
        beat = node(Heartbeat, name, attempt=2, phase="INSTALLING_REQUIREMENTS")
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")
    assert job_of(project).substatus == S.INSTALLING_REQUIREMENTS
    notice = node(SpotPreempted, A2N1, attempt=2)
    call("on_spot_preempted", "spot_preempted", notice, message_id="p2")
    assert job_of(project).nodes == [A2N0, A2R1]
    host.api._faults.clear()  # the Compute API is well again
    process = deps.current()

    def tick() -> None:
        call("reaper", "reaper_tick", ReaperTick(), message_id="tick")

    compute = ReaperMidTell(process.compute, tick)
    monkeypatch.setattr(deps, "_current", deps.Deps(process.settings, compute=compute))
    boot(call, A2R1)
    assert compute.fired
    assert [n for n in names(host) if "-a1-" in n] == []
    job = job_of(project)
    assert (job.attempt, job.replacing, job.substatus) == (2, None, S.INSTALLING_REQUIREMENTS)
    for name in (A2N0, A2R1):
        assert metadata(host, name)[RESTORE_METADATA_KEY] == "go", name
