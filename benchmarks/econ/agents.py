"""The VMs' agents and trainers of a simulated run, modelled (``model.Params``).

A VM boots for ``boot_s`` (or a drawn time), then trains; on a preemption the trainer
checkpoints (the step in progress is lost) and the agent reports. On a gang's
other nodes the ranks agree on the step to stop at, in the step's collective
(``vm_image/trainers/digits_mlp.py``): the noticed node's agent reports, with
no step, once its ranks have stopped; rank 0 saves that step on node 0, whose
agent reports the gang's stop (``gang_stop``) once it is written, and every
other survivor reports its stop too. Before its boot (or while its ranks are
not running) only the preemption log sink reports it.

When the job lets a lost node be replaced (``replace_node_timeout_s`` > 0),
the survivors then wait, as the real agent does (``vm_image/agent/regroup.py``):
once the functions write the ``spotline-regroup`` metadata on the local cloud
(seen at once: the real agent's read hangs on it), every node restarts its
ranks from the save, ``restart_s`` later. A replacement VM boots,
reports its boot, and waits behind its restore gate for the same
regroup. If the functions relaunch the gang whole instead, the survivors go
with their attempt (the functions delete them). A gang that loses a node as
it boots waits the same way, with nothing saved: the regroup starts its
ranks once every survivor is up.

An elastic job (``min_nodes``, ``spotline.shared.domain.gang_resize``): the
functions may regroup the survivors alone (a regroup naming only them, its
ranks renumbered); they restart from the save at once and train at their
size (k of n nodes do k/n of the gang's work a second) while the
replacement waits behind its gate. When the functions ask that smaller gang
to stop (``spotline-gang-stop``: its generation, seen at once, as the real
agent's hanging read sees it), its ranks stop at a step, its first node
saves, every node reports the stop with its generation and waits for the
regroup at the full size.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from benchmarks.econ.breakdown import Stop
from benchmarks.econ.cloud_time import TimedCompute
from benchmarks.econ.model import Job, Params
from benchmarks.econ.wire import log_entry
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.contract.assignment import Assignment, Regroup
from spotline.shared.contract.events import Heartbeat, JobFinished, SpotPreempted, VmBooted
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.vms import (
    EVENT_TOKEN_METADATA_KEY,
    GANG_STOP_METADATA_KEY,
    JOB_METADATA_KEY,
    MANAGED_LABEL,
    REGROUP_METADATA_KEY,
    RESTORE_GO,
    RESTORE_METADATA_KEY,
    RESTORE_UNTIL,
    RESTORE_WAIT,
)

JOB_ID = "econ"
GATE_POLL_S = 1.0
# The real agent's wait for a regroup beyond the job's bound
# (``vm_image/agent/regroup.py`` REGROUP_MARGIN_S).
REGROUP_MARGIN_S = 90.0


@dataclass
class Vm:
    """One VM of an attempt, as its agent sees it."""

    name: str
    zone: str
    instance_id: str
    rank: int
    token: str
    booted: bool = False
    noticed_s: float | None = None  # when its preemption notice came


@dataclass
class Attempt:
    """One attempt's gang, as its agents see it.

    Attributes:
        vms: the VM of each rank now (a replacement takes its lost node's place).
        train_start: when its ranks last started training (None: not yet).
        lost: let go: its VMs are going (or it finished).
        stop: its last stop.
        stopped_s: when its ranks stopped with a node's loss, to wait for a
            regroup (None: not waiting).
        hung: its ranks restarted with a node whose agent had stopped (taken
            in its wait, before the functions heard of it): they wait in the
            rendezvous for a node that never comes, and no longer for a
            regroup, until the functions let the attempt go.
        generation: the regroup its ranks run at.
        runs: counts its ranks' starts and stops: a finish planned before is void.
        up_s: when its first nodes are up (the slowest's boot done).
        members: the VMs its ranks run on, by rank, when an elastic gang
            regrouped without its replacement (empty: ``vms``, the whole gang).
    """

    number: int
    started: float  # seconds since submission
    vms: list[Vm]
    train_start: float | None = None
    lost: bool = False
    stop: Stop | None = None
    stopped_s: float | None = None
    generation: int = 0
    runs: int = 0
    hung: bool = False
    up_s: float = 0.0
    members: list[Vm] = field(default_factory=list)

    @property
    def gang(self) -> list[Vm]:
        """The VMs its ranks run on, by rank: its head (which saves) first."""
        return self.members or self.vms

    @property
    def rate(self) -> float:
        """The gang's work done per second of training at its size."""
        return len(self.gang) / len(self.vms)

    @property
    def training(self) -> bool:
        running = self.train_start is not None and self.stopped_s is None
        return running and not self.lost and not self.hung


class ModelledAgents:
    """The agents of a run's VMs; ``SpotlineRun`` provides the world: its
    clock, its event queue and its deliveries."""

    job: Job
    params: Params
    cloud: LocalCloud
    compute: TimedCompute
    attempts: dict[int, Attempt]
    known: dict[str, Vm]  # every VM of the run, by name
    saved_s: float  # training progress in the newest checkpoint
    preemptions: int
    replacements: int  # VMs inserted for a lost node, within its attempt
    stops: list[Stop]
    regroup_wait_s: float  # the job's replace_node_timeout_s (0: a gang never waits)
    boots: Callable[[int], list[float]]  # insert -> training of so many VMs
    now_s: float

    def _at(self, at: float, action: Callable[[], None]) -> None:
        raise NotImplementedError

    def _publish(self, topic: str, event: BaseModel | bytes, delay: float | None = None) -> None:
        raise NotImplementedError

    def _clock(self) -> datetime:
        raise NotImplementedError

    def _local_s(self) -> float:
        raise NotImplementedError

    def _wake_agents(self) -> None:
        """An agent for each VM not seen before: a new attempt's gang, or a
        lost node's replacement in its attempt. A new attempt lets the
        earlier ones go (their VMs are being deleted)."""
        fresh: dict[int, list[Vm]] = {}
        for vm in self.cloud.list({MANAGED_LABEL: "true"}):
            if vm["state"] != "RUNNING" or vm["name"] in self.known:
                continue
            assignment = Assignment.model_validate_json(vm["metadata"][JOB_METADATA_KEY])
            rank = assignment.nodes.index(vm["name"]) if assignment.nodes else 0
            token = str(vm["metadata"].get(EVENT_TOKEN_METADATA_KEY, ""))
            found = Vm(vm["name"], vm["zone"], str(vm["id"]), rank, token)
            self.known[found.name] = found
            fresh.setdefault(assignment.attempt, []).append(found)
        for number, vms in sorted(fresh.items()):
            attempt = self.attempts.get(number)
            if attempt is not None:
                for replacement in vms:
                    self._replaced(attempt, replacement)
                continue
            for earlier in self.attempts.values():
                earlier.lost = True
            started = min(self.compute.billing.born.get(v.name, self._local_s()) for v in vms)
            attempt = Attempt(number, started, sorted(vms, key=lambda v: v.rank))
            self.attempts[number] = attempt
            # The ranks start together: the gang waits for its slowest node.
            up = attempt.up_s = started + max(self.boots(len(vms)))
            self._at(up, functools.partial(self._boot, attempt))

    def _replaced(self, attempt: Attempt, vm: Vm) -> None:
        """A VM inserted for a lost node of ``attempt``: it boots, reports,
        and waits for the gang's regroup (its restore gate)."""
        self.replacements += 1
        attempt.vms[vm.rank] = vm
        born = self.compute.billing.born.get(vm.name, self._local_s())
        up = born + self.boots(1)[0]
        self._at(up, functools.partial(self._boot_replacement, attempt, vm))

    def _boot_replacement(self, attempt: Attempt, vm: Vm) -> None:
        found = self.cloud.get(vm.name, vm.zone)
        if attempt.lost or vm.noticed_s is not None or found is None:
            return
        if found["state"] != "RUNNING":
            return
        vm.booted = True
        common = self._common(attempt, vm)
        self._publish("vm_booted", VmBooted(**common, zone=vm.zone, instance_id=vm.instance_id))

    def _regroups(self) -> None:
        """Survivors waiting for a regroup restart their ranks once the
        functions wrote it on their VMs (the replacement's gate opens with it)."""
        for attempt in self.attempts.values():
            if attempt.lost or attempt.stopped_s is None:
                continue
            if self.now_s > attempt.stopped_s + self.regroup_wait_s + REGROUP_MARGIN_S:
                attempt.lost = True  # the agents gave up waiting; their VMs idle until deleted
                continue
            regroup = max(
                filter(None, map(self._regroup_of, attempt.gang)),
                key=lambda found: found.generation,
                default=None,
            )
            if regroup is None or regroup.generation <= attempt.generation:
                continue
            named = {vm.name: vm for vm in attempt.vms}
            if not set(regroup.nodes) <= set(named):
                continue  # a node list of another attempt's VMs: the functions' to see
            gang = [named[name] for name in regroup.nodes]
            if any(self._regroup_of(vm) != regroup for vm in gang):
                continue  # not every node told yet (a node gone: the functions' to see)
            attempt.members = gang if len(gang) < len(attempt.vms) else []
            self._restart(attempt, regroup.generation)

    def _grow_requests(self) -> None:
        """A smaller elastic gang the functions asked to stop (its generation
        in ``spotline-gang-stop``) stops at a step and saves, to grow back."""
        for attempt in self.attempts.values():
            if not attempt.members or not attempt.training:
                continue
            asked = [self._metadata_of(vm, GANG_STOP_METADATA_KEY) for vm in attempt.gang]
            if str(attempt.generation) not in asked:
                continue
            assert attempt.train_start is not None
            trained = max(0.0, self.now_s - attempt.train_start)  # (asked as it restarts)
            progress = self.saved_s + trained * attempt.rate
            self.saved_s = self.params.saved_on_notice(progress)
            self._stop_ranks(attempt, None)
            attempt.stopped_s = self.now_s
            attempt.runs += 1

    def _regroup_of(self, vm: Vm) -> Regroup | None:
        value = self._metadata_of(vm, REGROUP_METADATA_KEY)
        return None if value is None else Regroup.model_validate_json(value)

    def _metadata_of(self, vm: Vm, key: str) -> str | None:
        """The VM's metadata item ``key`` (None: absent, or the VM not running)."""
        found = self.cloud.get(vm.name, vm.zone)
        if found is None or found["state"] != "RUNNING":
            return None
        value = found.get("metadata", {}).get(key)
        return None if value is None else str(value)

    def _restart(self, attempt: Attempt, generation: int) -> None:
        """Every rank restarts from the save, ``restart_s`` on (if every
        node's agent is still there to start them)."""
        attempt.generation = generation
        attempt.stopped_s = None
        attempt.runs += 1
        if any(vm.noticed_s is not None for vm in attempt.gang):
            attempt.hung = True
            return
        start = max(self.now_s + self.params.restart_s, attempt.up_s)
        self._train(attempt, start, booting=False)

    def _common(self, attempt: Attempt, vm: Vm) -> dict[str, Any]:
        return {
            "job_id": JOB_ID,
            "attempt": attempt.number,
            "instance": vm.name,
            "sent_at": self._clock(),
            "token": vm.token,
        }

    def _boot(self, attempt: Attempt) -> None:
        if attempt.lost or attempt.stopped_s is not None or attempt.train_start is not None:
            return  # a node lost as it booted: the regroup starts its ranks
        if any(self._gate_shut(vm) for vm in attempt.vms):
            # The earlier attempt's VMs may still save (the restore gate):
            # the real agent's hanging read, as a poll every GATE_POLL_S.
            self._at(self.now_s + GATE_POLL_S, functools.partial(self._boot, attempt))
            return
        attempt.runs += 1
        self._train(attempt, self.now_s, booting=True)

    def _train(self, attempt: Attempt, start_s: float, *, booting: bool) -> None:
        """Every node trains from the save from ``start_s``: each says so
        (after its boot's report, when ``booting``), and the finish is planned."""
        attempt.train_start = start_s
        step = self._step(self.saved_s)
        for vm in attempt.gang:
            vm.booted = True
            common = self._common(attempt, vm)
            if booting:
                booted = VmBooted(**common, zone=vm.zone, instance_id=vm.instance_id)
                self._publish("vm_booted", booted)
            beat = Heartbeat(
                **common,
                phase=JobSubstatus.TRAINING,
                step=step,
                resumed_from_step=step if step else None,
            )
            self._publish("epoch_done", beat)
        self._plan_finish(attempt)

    def _plan_finish(self, attempt: Attempt) -> None:
        assert attempt.train_start is not None
        end = attempt.train_start + (self.job.work_s - self.saved_s) / attempt.rate
        self._at(end, functools.partial(self._finish, attempt, attempt.runs))

    def _gate_shut(self, vm: Vm) -> bool:
        """Whether the VM's restore gate still holds its trainer back
        (``vm_image/agent/restore_gate.py``: until GO, or the time it names)."""
        found = self.cloud.get(vm.name)
        value = str((found or {}).get("metadata", {}).get(RESTORE_METADATA_KEY, RESTORE_GO))
        if not value.startswith(RESTORE_WAIT):
            return False
        until = value.removeprefix(f"{RESTORE_WAIT}{RESTORE_UNTIL}")
        return not until.isdigit() or self._clock().timestamp() < int(until)

    def _finish(self, attempt: Attempt, runs: int) -> None:
        if not attempt.training or attempt.runs != runs:
            return
        # Workers first: node 0's exit ends the job (``on_job_finished``).
        for vm in reversed(attempt.gang):
            self._publish("job_finished", JobFinished(**self._common(attempt, vm), exit_code=0))
        self.saved_s = self.job.work_s
        attempt.lost = True  # its trainer is done: later preemptions hit nothing

    def _heartbeats(self) -> None:
        for attempt in self.attempts.values():
            if attempt.lost or attempt.train_start is None:
                continue
            for vm in attempt.vms:
                if not vm.booted or vm.noticed_s is not None:
                    continue
                beat = Heartbeat(**self._common(attempt, vm), phase=JobSubstatus.TRAINING)
                self._publish("epoch_done", beat, delay=0.0)

    def _preempt(self, node: int) -> None:
        """Compute Engine takes the Spot VM of ``node``, if one is up there."""
        attempt = next((a for a in self.attempts.values() if not a.lost), None)
        if attempt is None or node >= len(attempt.vms) or self.now_s < attempt.started:
            return  # (a VM inserted after its deletes' wait was not there yet)
        vm = attempt.vms[node]
        found = self.cloud.get(vm.name, vm.zone)
        if found is None or found["state"] != "RUNNING" or vm.noticed_s is not None:
            return  # deleted, stopped or in its notice already (being let go)
        self.preemptions += 1
        vm.noticed_s = self.now_s
        stop = attempt.stop = Stop(attempt.number, node, self.now_s, attempt.started)
        self.stops.append(stop)
        if vm in attempt.gang and attempt.training and attempt.train_start is not None:
            stop.trained_s = max(0.0, self.now_s - attempt.train_start)
            progress = self.saved_s + stop.trained_s * attempt.rate
            # The trainer saves at the end of its step, then the agent reports.
            self.saved_s = self.params.saved_on_notice(progress)
            stop.lost_work_s = progress - self.saved_s
            self._stop_ranks(attempt, vm)
            if len(attempt.vms) > 1 and self.regroup_wait_s > 0:
                attempt.stopped_s = self.now_s  # the survivors wait for a regroup
                attempt.runs += 1
            else:
                attempt.lost = True
        else:
            # Before the agent is up, or while its ranks are not running,
            # only the log sink reports it. A gang booting is lost whole; one
            # waiting for a regroup (or hung), or training without this VM,
            # goes only if the functions say.
            booting = attempt.train_start is None and attempt.stopped_s is None
            if booting and len(attempt.vms) > 1 and self.regroup_wait_s > 0:
                attempt.stopped_s = self.now_s  # replaced: nothing saved, the gang waits
                attempt.runs += 1
            elif attempt.stopped_s is None and not attempt.hung and vm in attempt.gang:
                attempt.lost = True
            self._publish("spot_preempted", log_entry(vm.zone, vm.name, vm.instance_id))
        self._at(self.now_s + self.params.notice_s, lambda: self._terminate(vm))

    def _stop_ranks(self, attempt: Attempt, noticed: Vm | None) -> None:
        """The reports of a stop of a training attempt, on ``noticed``'s
        notice (None: the functions asked an elastic gang to stop): the
        step saved (``saved_s``) by rank 0 on the gang's first node; the
        other nodes' agents say they stopped, a step on, each with the
        generation its ranks ran at."""
        step = self._step(self.saved_s)
        uri = f"memory://econ/checkpoints/step-{step}"
        saved_at = self.now_s + self.params.checkpoint_s
        stopped_at = self.now_s + self.params.step_s
        generation = attempt.generation
        head, *others = attempt.gang
        if noticed is head:
            report = SpotPreempted(
                **self._common(attempt, head), step=step, checkpoint_uri=uri, generation=generation
            )
            self._at(saved_at, functools.partial(self._publish, "spot_preempted", report))
        else:
            if noticed is not None:
                # Another node: its ranks stop at the step's end and save
                # nothing, and its agent says so.
                lost = SpotPreempted(**self._common(attempt, noticed), generation=generation)
                self._at(stopped_at, functools.partial(self._publish, "spot_preempted", lost))
            saved = SpotPreempted(
                **self._common(attempt, head),
                step=step,
                checkpoint_uri=uri,
                gang_stop=True,
                generation=generation,
            )
            self._at(saved_at, functools.partial(self._publish, "spot_preempted", saved))
        for other in others:
            if other is not noticed:
                done = SpotPreempted(
                    **self._common(attempt, other), gang_stop=True, generation=generation
                )
                self._at(stopped_at, functools.partial(self._publish, "spot_preempted", done))

    def _terminate(self, vm: Vm) -> None:
        """The notice is over: Compute Engine stops the VM (if still there)."""
        if self.cloud.get(vm.name, vm.zone) is not None:
            self.cloud.preempt(vm.name, notice_s=0.0, zone=vm.zone)
            self.compute.billing.ended(vm.name, self.now_s)

    def _step(self, progress_s: float) -> int:
        return round(progress_s / self.params.step_s)
