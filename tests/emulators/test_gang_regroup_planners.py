"""Two handlers planning a gang's regroup at once, through the real handlers
on the Firestore emulator and the local cloud: the regroup is written on the
job before any node is told (``node_replacement.recorded``), so the second
handler plans from the job that shows the first, and a loss heard while the
nodes are told is one after the regroup. Each order is played by running the
second handler inside the first one's first regroup write to a node's
metadata (as when that answer is slow), through a Compute that only delegates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.contract.events import ReaperTick, SpotPreempted
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.vms import (
    GANG_STOP_METADATA_KEY,
    REGROUP_METADATA_KEY,
    RESTORE_METADATA_KEY,
)
from spotline.shared.ports.compute import Compute
from tests.emulators.test_gang_further_losses import R2, three_training
from tests.emulators.test_gang_replacement import boot, job_of, metadata, preempt
from tests.emulators.test_gang_resize import N0, N1, N2, R1, elastic_gang, gang_stop, regroup, told
from tests.emulators.test_gangs import node

pytestmark = pytest.mark.emulators
S = JobSubstatus


class MidTell:
    """The local cloud's Compute, through which ``then`` runs in full just
    before the first regroup written to a node lands."""

    def __init__(self, inner: Compute, then: Callable[[], Any]) -> None:
        self.inner, self.then, self.fired = inner, then, False

    def set_metadata(self, zone: str, name: str, items: dict[str, str], *args: Any) -> None:
        if not self.fired and REGROUP_METADATA_KEY in items:
            self.fired = True
            self.then()
        self.inner.set_metadata(zone, name, items, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def mid_tell(monkeypatch: pytest.MonkeyPatch, then: Callable[[], Any]) -> MidTell:
    process = deps.current()
    compute = MidTell(process.compute, then)
    monkeypatch.setattr(deps, "_current", deps.Deps(process.settings, compute=compute))
    return compute


def test_a_shrink_and_the_replacements_boot_planned_at_once_tell_one_node_list_each(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An elastic 3-node gang lost node 1. Node 0's stop report (its save
    complete) plans the survivors' shrink, at generation 2; as it tells them,
    the replacement's boot report comes and plans the whole gang. Before, the
    boot's handler planned from the job as it was: it told all three nodes
    the whole gang at generation 1 and wrote the job so, then the shrink's
    generation 2 landed on nodes 0 and 2, newer: they trained as two while
    the job and the replacement waited for three. Now the boot's handler
    finds the shrink on the job and asks the smaller gang to grow back."""
    elastic_gang(call)
    preempt(call, N1, step=38)
    compute = mid_tell(monkeypatch, lambda: boot(call, R1))
    gang_stop(call, N0, 40, generation=0, mid="g0")
    assert compute.fired
    for name in (N0, N2):
        assert told(host, name) == regroup(2, [N0, N2]), name
        assert metadata(host, name)[GANG_STOP_METADATA_KEY] == "2", name
    assert told(host, R1) is None and metadata(host, R1)[RESTORE_METADATA_KEY] == "wait"
    job = job_of(project)
    assert (job.substatus, job.gang_generation, job.telling) == (S.REPLACING_NODE, 2, None)
    assert job.replacing is not None and job.replacing.grow_asked
    # The smaller gang stops at generation 2: the whole gang regroups at 3.
    gang_stop(call, N0, 60, generation=2, mid="g0-2")
    for name in (N0, R1, N2):
        assert told(host, name) == regroup(3, [N0, R1, N2]), name
    assert metadata(host, R1)[RESTORE_METADATA_KEY] == "go"
    job = job_of(project)
    assert (job.substatus, job.replacing, job.gang_generation) == (S.TRAINING, None, 3)


def test_a_loss_while_the_regroup_is_told_waits_for_node_zeros_save_after_it(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3-node gang lost node 1; node 0 saved at step 40; the replacement's
    boot regroups the gang at generation 1. As the nodes are told, node 2 is
    lost, its agent reporting it ran at generation 1 (the gang trained on).
    Before, the regroup was not written yet: the loss read as a further one
    while the gang waited, node 0's save at step 40 counted, and the gang
    regrouped from it as soon as node 2's replacement booted. Now the gang
    waits for node 0's stop at generation 1."""
    three_training(call)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    lost = node(SpotPreempted, N2, generation=1)
    compute = mid_tell(
        monkeypatch, lambda: call("on_spot_preempted", "spot_preempted", lost, message_id="p2")
    )
    boot(call, R1, mid="b1")
    assert compute.fired
    job = job_of(project)
    assert (job.substatus, job.nodes, job.gang_generation) == (S.REPLACING_NODE, [N0, R1, R2], 2)
    assert job.replacing is not None and not job.replacing.saved
    boot(call, R2, mid="b2")
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert told(host, N0) == regroup(1, [N0, R1, N2])  # nothing newer: node 0 still saving
    assert job_of(project).substatus == S.REPLACING_NODE
    gang_stop(call, N0, 55, generation=1, mid="g0-1")
    for name in (N0, R1, R2):
        assert told(host, name) == regroup(2, [N0, R1, R2]), name
    job = job_of(project)
    assert (job.substatus, job.replacing, job.attempts[0].checkpoint_step) == (
        S.TRAINING,
        None,
        55,
    )


def test_a_regroups_late_write_never_takes_a_node_back_to_an_older_generation(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The survivors' shrink (generation 2) is told, its first write slow.
    Meanwhile the replacement boots (the shrink told again, the smaller gang
    asked to grow back), node 0 stops, and the whole gang is told its
    regroup at 3. Then the shrink's slow writes land: they leave the newer
    regroup in place (else nodes 0 and 2 would read 2, and wait for ever for
    the regroup at 3 they never saw)."""
    elastic_gang(call)
    preempt(call, N1, step=38)

    def meanwhile() -> None:
        boot(call, R1)
        gang_stop(call, N0, 60, generation=2, mid="g0-2")

    compute = mid_tell(monkeypatch, meanwhile)
    gang_stop(call, N0, 40, generation=0, mid="g0")
    assert compute.fired
    for name in (N0, R1, N2):
        assert told(host, name) == regroup(3, [N0, R1, N2]), name
    job = job_of(project)
    assert (job.substatus, job.replacing, job.gang_generation, job.telling) == (
        S.TRAINING,
        None,
        3,
        None,
    )


class Died(BaseException):
    """The function's process ends here (not an ``Exception``: nothing catches it)."""


def test_a_regroup_recorded_by_a_function_that_died_before_telling_is_told_by_the_reaper(
    call: Callable[..., Any], host: LocalCloud, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replacement's boot report's function writes the regroup on the
    job and dies before its first node is told: the job reads TRAINING, the
    regroup still to tell, and the reaper's next sweep tells every node."""
    three_training(call)
    preempt(call, N1, step=38)
    gang_stop(call, N0, 40, generation=0, mid="g0")

    def die() -> None:
        raise Died

    process = deps.current()
    mid_tell(monkeypatch, die)
    with pytest.raises(Died):
        boot(call, R1, mid="b1")
    monkeypatch.setattr(deps, "_current", process)
    job = job_of(project)
    assert (job.substatus, job.replacing, job.gang_generation) == (S.TRAINING, None, 1)
    assert job.telling is not None and told(host, N0) is None
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    for name in (N0, R1, N2):
        assert told(host, name) == regroup(1, [N0, R1, N2]), name
    assert metadata(host, R1)[RESTORE_METADATA_KEY] == "go"
    assert job_of(project).telling is None
