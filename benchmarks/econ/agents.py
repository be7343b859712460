"""The VMs' agents and trainers of a simulated run, modelled (``model.Params``).

A VM boots for ``boot_s``, then trains; on a preemption the trainer
checkpoints (the step in progress is lost) and the agent reports. On a gang's
other nodes the ranks agree on the step to stop at, in the step's collective
(``vm_image/trainers/digits_mlp.py``): the noticed node's agent reports, with
no step, once its ranks have stopped; rank 0 saves that step on node 0, whose
agent reports the gang's stop (``gang_stop``) once it is written. Before its
boot only the preemption log sink reports it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from benchmarks.econ.breakdown import Stop
from benchmarks.econ.cloud_time import TimedCompute
from benchmarks.econ.model import Job, Params
from benchmarks.econ.wire import log_entry
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.events import Heartbeat, JobFinished, SpotPreempted, VmBooted
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.vms import (
    EVENT_TOKEN_METADATA_KEY,
    JOB_METADATA_KEY,
    MANAGED_LABEL,
    RESTORE_GO,
    RESTORE_METADATA_KEY,
    RESTORE_UNTIL,
    RESTORE_WAIT,
)

JOB_ID = "econ"
GATE_POLL_S = 1.0


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
    number: int
    started: float  # seconds since submission
    vms: list[Vm]
    train_start: float | None = None
    lost: bool = False
    stop: Stop | None = None  # how it was lost


class ModelledAgents:
    """The agents of a run's VMs; ``SpotlineRun`` provides the world: its
    clock, its event queue and its deliveries."""

    job: Job
    params: Params
    cloud: LocalCloud
    compute: TimedCompute
    attempts: dict[int, Attempt]
    saved_s: float  # training progress in the newest checkpoint
    preemptions: int
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
        """An agent for each VM of an attempt not seen before."""
        fresh: dict[int, list[Vm]] = {}
        for vm in self.cloud.list({MANAGED_LABEL: "true"}):
            if vm["state"] != "RUNNING":
                continue
            assignment = Assignment.model_validate_json(vm["metadata"][JOB_METADATA_KEY])
            if assignment.attempt in self.attempts:
                continue
            rank = assignment.nodes.index(vm["name"]) if assignment.nodes else 0
            token = str(vm["metadata"].get(EVENT_TOKEN_METADATA_KEY, ""))
            fresh.setdefault(assignment.attempt, []).append(
                Vm(vm["name"], vm["zone"], str(vm["id"]), rank, token)
            )
        for number, vms in fresh.items():
            started = min(self.compute.billing.born.get(v.name, self._local_s()) for v in vms)
            attempt = Attempt(number, started, sorted(vms, key=lambda v: v.rank))
            self.attempts[number] = attempt
            self._at(started + self.params.boot_s, functools.partial(self._boot, attempt))

    def _common(self, attempt: Attempt, vm: Vm) -> dict[str, Any]:
        return {
            "job_id": JOB_ID,
            "attempt": attempt.number,
            "instance": vm.name,
            "sent_at": self._clock(),
            "token": vm.token,
        }

    def _boot(self, attempt: Attempt) -> None:
        if attempt.lost:
            return
        if any(self._gate_shut(vm) for vm in attempt.vms):
            # The earlier attempt's VMs may still save (the restore gate):
            # the real agent's hanging read, as a poll every GATE_POLL_S.
            self._at(self.now_s + GATE_POLL_S, functools.partial(self._boot, attempt))
            return
        attempt.train_start = self.now_s
        step = self._step(self.saved_s)
        for vm in attempt.vms:
            vm.booted = True
            common = self._common(attempt, vm)
            self._publish("vm_booted", VmBooted(**common, zone=vm.zone, instance_id=vm.instance_id))
            beat = Heartbeat(
                **common,
                phase=JobSubstatus.TRAINING,
                step=step,
                resumed_from_step=step if step else None,
            )
            self._publish("epoch_done", beat)
        end = self.now_s + (self.job.work_s - self.saved_s)
        self._at(end, lambda: self._finish(attempt))

    def _gate_shut(self, vm: Vm) -> bool:
        """Whether the VM's restore gate still holds its trainer back
        (``vm_image/agent/restore_gate.py``: until GO, or the time it names)."""
        found = self.cloud.get(vm.name)
        value = str((found or {}).get("metadata", {}).get(RESTORE_METADATA_KEY, RESTORE_GO))
        if not value.startswith(RESTORE_WAIT):
            return False
        until = value.removeprefix(f"{RESTORE_WAIT}{RESTORE_UNTIL}")
        return not until.isdigit() or self._clock().timestamp() < int(until)

    def _finish(self, attempt: Attempt) -> None:
        if attempt.lost:
            return
        # Workers first: node 0's exit ends the job (``on_job_finished``).
        for vm in reversed(attempt.vms):
            self._publish("job_finished", JobFinished(**self._common(attempt, vm), exit_code=0))
        self.saved_s = self.job.work_s
        attempt.lost = True  # its trainer is done: later preemptions hit nothing

    def _heartbeats(self) -> None:
        for attempt in self.attempts.values():
            if attempt.lost or attempt.train_start is None:
                continue
            for vm in attempt.vms:
                beat = Heartbeat(**self._common(attempt, vm), phase=JobSubstatus.TRAINING)
                self._publish("epoch_done", beat, delay=0.0)

    def _preempt(self, node: int) -> None:
        """Compute Engine takes the Spot VM of ``node``, if one is up there."""
        attempt = next((a for a in self.attempts.values() if not a.lost), None)
        if attempt is None or node >= len(attempt.vms) or self.now_s < attempt.started:
            return  # (a VM inserted after its deletes' wait was not there yet)
        vm = attempt.vms[node]
        found = self.cloud.get(vm.name, vm.zone)
        if found is None or found["state"] != "RUNNING":
            return  # deleted or stopped already (the attempt is being let go)
        self.preemptions += 1
        attempt.lost = True
        vm.noticed_s = self.now_s
        stop = attempt.stop = Stop(attempt.number, node, self.now_s, attempt.started)
        if vm.booted and attempt.train_start is not None:
            stop.trained_s = self.now_s - attempt.train_start
            progress = self.saved_s + stop.trained_s
            # The trainer saves at the end of its step, then the agent reports.
            self.saved_s = self.params.saved_on_notice(progress)
            step = self._step(self.saved_s)
            uri = f"memory://econ/checkpoints/step-{step}"
            saved_at = self.now_s + self.params.checkpoint_s
            if node == 0:
                report = SpotPreempted(**self._common(attempt, vm), step=step, checkpoint_uri=uri)
                self._at(saved_at, lambda: self._publish("spot_preempted", report))
            else:
                # Another node: its ranks stop at the step's end and save
                # nothing, and its agent says so; rank 0 saves on node 0.
                noticed = SpotPreempted(**self._common(attempt, vm))
                self._at(
                    self.now_s + self.params.step_s,
                    lambda: self._publish("spot_preempted", noticed),
                )
                node_0 = attempt.vms[0]
                stopped = SpotPreempted(
                    **self._common(attempt, node_0), step=step, checkpoint_uri=uri, gang_stop=True
                )
                self._at(saved_at, lambda: self._publish("spot_preempted", stopped))
            stop.lost_work_s = progress - self.saved_s
        else:
            # Before the agent is up only the log sink reports it.
            self._publish("spot_preempted", log_entry(vm.zone, vm.name, vm.instance_id))
        self._at(self.now_s + self.params.notice_s, lambda: self._terminate(vm))

    def _terminate(self, vm: Vm) -> None:
        """The notice is over: Compute Engine stops the VM (if still there)."""
        if self.cloud.get(vm.name, vm.zone) is not None:
            self.cloud.preempt(vm.name, notice_s=0.0, zone=vm.zone)
            self.compute.billing.ended(vm.name, self.now_s)

    def _step(self, progress_s: float) -> int:
        return round(progress_s / self.params.step_s)
