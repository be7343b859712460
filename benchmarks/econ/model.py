"""What the simulator models rather than runs: the job, the VM's timings, and
the result of one run.

Everything here is a stated assumption, not spotline code: the VM's boot time,
the checkpoint write, the 30 s notice, Compute Engine's delete, the trainer's
steady progress and its periodic saves. The defaults are the figures the
docs/benchmarks.md quotes, each with its source; each can be changed per run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotline.shared.domain.catalog import Machine, load_catalog

if TYPE_CHECKING:
    from benchmarks.econ.breakdown import Breakdown


@dataclass(frozen=True)
class Params:
    """The modelled timings, in seconds.

    Attributes:
        boot_s: insert -> training: VM boot, image, GPU driver, agent, data.
            About 90 s for a GPU VM from a baked image on Compute Engine.
        notice_s: Compute Engine's preemption notice (30 s for Spot VMs).
        checkpoint_s: writing a checkpoint; on the notice it must fit in
            ``notice_s``.
        step_s: one optimizer step. On the notice the trainer saves at the end
            of the step it is in: it loses what it did of that step (< 1 step).
        deliver_s: an event's publish -> its function acting on it. 0.43 s is
            BENCHMARKS.md's median preemption -> replacement insert, event path.
        period_s: the periodic checkpoint of the SkyPilot-like poller.
        detect_s: the poller's detection of a preempted VM, after it is gone.
        max_hours: a run that has not finished by then is cut off (restarting
            from scratch under frequent preemptions never finishes).
        delete_s: Compute Engine's delete of a running VM, from the call to
            the VM gone (billing stops then). A Spot VM's guest gets up to
            30 s to shut down (the Compute API's ``skipGuestOsShutdown``: 30 s
            for Spot VMs), which the agent's unit may use (``TimeoutStopSec=28``):
            the whole 30 s is assumed. A VM in its notice is gone at the
            notice's end; a stopped one at once.
        restart_s: a gang's ranks restarted in place from the save once it
            regrouped around a lost node's replacement (a new process group,
            the state read back).
    """

    boot_s: float = 90.0
    notice_s: float = 30.0
    checkpoint_s: float = 10.0
    step_s: float = 1.0
    deliver_s: float = 0.43
    period_s: float = 1800.0
    detect_s: float = 15.0
    max_hours: float = 168.0
    delete_s: float = 30.0
    restart_s: float = 20.0

    def __post_init__(self) -> None:
        if self.checkpoint_s > self.notice_s:
            raise ValueError(
                f"checkpoint_s={self.checkpoint_s} does not fit in the notice ({self.notice_s} s)"
            )
        timings = (self.boot_s, self.checkpoint_s, self.deliver_s, self.detect_s, self.delete_s)
        if min(*timings, self.restart_s) < 0:
            raise ValueError(
                "boot_s, checkpoint_s, deliver_s, detect_s, delete_s and restart_s must be >= 0"
            )
        if min(self.step_s, self.period_s, self.max_hours) <= 0:
            raise ValueError("step_s, period_s and max_hours must be > 0")

    def saved_on_notice(self, progress_s: float) -> float:
        """The progress a notice checkpoint keeps: up to the last whole step."""
        return math.floor(progress_s / self.step_s + 1e-9) * self.step_s

    def saved_by_period(self, progress_s: float) -> float:
        """The progress the poller's last periodic checkpoint kept."""
        return math.floor(progress_s / self.period_s + 1e-9) * self.period_s

    def delete_done_s(self, now_s: float, noticed_s: float | None) -> float:
        """When a delete sent at ``now_s`` has the VM gone: a VM in its notice
        (since ``noticed_s``) at the notice's end, a running one ``delete_s`` on."""
        if noticed_s is not None:
            return max(now_s, noticed_s + self.notice_s)
        return now_s + self.delete_s


# Where each figure comes from: the report prints them with the values.
SOURCES = {
    "boot_s": "assumption: a GPU VM from a baked image (boot, driver, agent, data)",
    "notice_s": "Compute Engine: a Spot VM's preemption notice",
    "checkpoint_s": "assumption: the trainer's save on the notice (must fit in it)",
    "step_s": "assumption: one optimizer step (the notice's save waits for its end)",
    "deliver_s": "BENCHMARKS.md: median preemption -> replacement insert, event path",
    "delete_s": "Compute API skipGuestOsShutdown: a Spot VM's guest gets 30 s to shut "
    "down; the agent's unit takes up to 28 s (TimeoutStopSec)",
    "restart_s": "assumption: torchrun restarting a regrouped gang's ranks from the save",
    "period_s": "issue 14: the SkyPilot-like poller checkpoints every 30 min",
    "detect_s": "issue 14: the poller notices a preempted VM 15 s after it is gone",
    "max_hours": "the simulation's cut-off",
}


@dataclass(frozen=True)
class Job:
    """A training job: ``hours`` of GPU work on ``nodes`` VMs of ``machine_id``
    (a gang: a preemption of any node stops them all)."""

    name: str
    machine_id: str
    hours: float
    nodes: int = 1

    def __post_init__(self) -> None:
        if self.machine_id not in load_catalog():
            known = ", ".join(sorted(load_catalog()))
            raise ValueError(f"machine_id {self.machine_id!r} is not in the catalog ({known})")
        if self.hours <= 0 or self.nodes < 1:
            raise ValueError(f"job {self.name}: hours must be > 0 and nodes >= 1")

    @property
    def machine(self) -> Machine:
        return load_catalog()[self.machine_id]

    @property
    def work_s(self) -> float:
        return self.hours * 3600

    @property
    def gpus(self) -> int:
        """GPUs of the whole gang."""
        return self.nodes * max(self.machine.gpu_count, 1)


@dataclass(frozen=True)
class Outcome:
    """One run of one strategy.

    Attributes:
        cost_usd: what the VMs cost.
        makespan_s: submission -> completion (or the cut-off).
        vm_s: VM-seconds billed, all nodes.
        kept_s: training progress kept at the end (the job's work when finished).
        preemptions: preemptions that hit a VM of the job.
        finished: False when cut off at ``Params.max_hours``.
        breakdown: where the makespan beyond on-demand went (spotline's runs).
    """

    strategy: str
    cost_usd: float
    makespan_s: float
    vm_s: float
    kept_s: float
    preemptions: int
    finished: bool
    breakdown: Breakdown | None = None

    def lost_gpu_hours(self, job: Job) -> float:
        """GPU-hours paid for that the result does not contain: boots,
        checkpoint writes, work redone, waiting."""
        per_vm = max(job.machine.gpu_count, 1)
        return (self.vm_s * per_vm - self.kept_s * job.gpus) / 3600
