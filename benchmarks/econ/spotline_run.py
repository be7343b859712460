"""A job run through spotline's real code, on a virtual clock.

What is real: the handlers (``submit_job``, ``on_vm_booted``,
``on_epoch_done``, ``on_spot_preempted``, ``on_job_finished``, ``reaper``)
through their Pub/Sub wrapper with real CloudEvents, and everything under them
(admission, placement, the gang insert, recovery, the queue, pricing); the
in-memory store; google-cloud-compute's client against the local cloud
(``infra.localcloud``), whose VMs are records. The job's cost is what spotline
itself records on the job (``lifecycle.accrue``).

What is modelled (``model.Params``): each VM's agent and trainer. A VM boots
for ``boot_s``, then trains; on a preemption the agent checkpoints (the step
in progress is lost) and reports; before its boot only the preemption log
sink reports it. Every event reaches its function ``deliver_s`` after it is
published. Cloud Scheduler's tick runs the reaper on the whole minute after
anything waits in the queue (the reaper has nothing else to do here: every
loss is reported).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import io
import itertools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from benchmarks.econ.model import Job, Outcome, Params
from benchmarks.econ.traces import Trace
from benchmarks.econ.wire import PROJECT, cloud_event, log_entry, settings
from functions import deps as process_deps
from functions.deps import Deps
from functions.handlers.on_epoch_done import on_epoch_done
from functions.handlers.on_job_finished import on_job_finished
from functions.handlers.on_spot_preempted import on_spot_preempted
from functions.handlers.on_vm_booted import on_vm_booted
from functions.handlers.reaper import reaper
from functions.handlers.submit_job import submit_job
from infra.localcloud.cloud import LocalCloud
from infra.localcloud.launchers import RecordLauncher
from infra.localcloud.quotas import DEFAULT_LIMITS
from shared.adapters.gce_compute import GceCompute
from shared.adapters.memory_store import InMemoryStore
from shared.adapters.recording_bus import RecordingBus
from shared.contract.assignment import Assignment
from shared.contract.events import (
    Heartbeat,
    JobFinished,
    ReaperTick,
    SpotPreempted,
    VmBooted,
)
from shared.domain.bounds import MAX_ATTEMPTS
from shared.domain.lifecycle import accrue
from shared.domain.states import JobStatus, JobSubstatus
from shared.domain.vms import EVENT_TOKEN_METADATA_KEY, JOB_METADATA_KEY, MANAGED_LABEL

T0 = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
JOB_ID = "econ"
HANDLERS: dict[str, Callable[[Any], None]] = {
    "submit": submit_job,
    "vm_booted": on_vm_booted,
    "epoch_done": on_epoch_done,
    "job_finished": on_job_finished,
    "spot_preempted": on_spot_preempted,
    "reaper_tick": reaper,
}


@dataclass
class _Vm:
    """One VM of an attempt, as its agent sees it."""

    name: str
    zone: str
    instance_id: str
    rank: int
    token: str
    alive: bool = True
    booted: bool = False


@dataclass
class _Attempt:
    number: int
    started: float  # seconds since submission
    vms: list[_Vm]
    train_start: float | None = None
    lost: bool = False


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    action: Callable[[], None] = field(compare=False)


class SpotlineRun:
    """One job, one trace, spotline's handlers; ``run()`` gives the outcome.

    Args:
        on_demand: place the job on the machine's on-demand twin (``ID.od``):
            Compute Engine never preempts it, so the trace does not apply.
    """

    def __init__(self, job: Job, trace: Trace, params: Params, *, on_demand: bool = False) -> None:
        self.job, self.trace, self.params = job, trace, params
        self.on_demand = on_demand
        self.events: list[_Event] = []
        self._seq = itertools.count()
        self._ids = itertools.count(1)
        self.now_s = 0.0
        self.saved_s = 0.0
        self.attempts: dict[int, _Attempt] = {}
        self.preemptions = 0
        self.ticks = 0
        self._tick_due: float | None = None
        self.failures: list[str] = []

    # -- the world --

    def run(self) -> Outcome:
        limits = {metric: 1e9 for metric in DEFAULT_LIMITS}
        with LocalCloud(PROJECT, RecordLauncher(), stop_grace_s=0.0, quota_limits=limits) as cloud:
            self.cloud = cloud
            self.store = InMemoryStore()
            self.deps = Deps(
                settings(cloud.endpoint),
                store=self.store,
                compute=GceCompute(
                    PROJECT, api_endpoint=cloud.endpoint, operation_timeout_s=5.0, read_retry_s=1.0
                ),
                bus=RecordingBus(PROJECT),
                clock=lambda: T0 + timedelta(seconds=self.now_s),
            )
            self._at(0.0, self._submit)
            if not self.on_demand:
                for p in self.trace.for_nodes(self.job.nodes):
                    self._at(p.t_h * 3600, functools.partial(self._preempt, p.node))
            limit = self.params.max_hours * 3600
            while self.events and not self._ended():
                event = heapq.heappop(self.events)
                if event.at > limit:
                    break
                self.now_s = event.at
                event.action()
            return self._outcome(min(self.now_s, limit))

    def _ended(self) -> bool:
        job = self.store.get_job(JOB_ID)
        return job is not None and job.status in JobStatus.terminal()

    def _at(self, at: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, _Event(at, next(self._seq), action))

    def _publish(self, topic: str, event: BaseModel | bytes, delay: float | None = None) -> None:
        """On the topic now; its function runs ``deliver_s`` later."""
        data = event if isinstance(event, bytes) else event.model_dump_json().encode()
        published = self.now_s
        wait = self.params.deliver_s if delay is None else delay
        self._at(self.now_s + wait, lambda: self._deliver(topic, data, published))

    def _deliver(self, topic: str, data: bytes, published_s: float) -> None:
        message_id = str(next(self._ids))
        event = cloud_event(topic, data, message_id, T0 + timedelta(seconds=published_s))
        with self._installed(), contextlib.redirect_stdout(io.StringIO()):
            try:
                HANDLERS[topic](event)
            except Exception as err:  # a 500: the simulation says so, it does not retry
                self.failures.append(f"{topic} at {self.now_s:.1f} s: {err!r}")
        self._wake_agents()
        self._schedule_tick()

    @contextlib.contextmanager
    def _installed(self) -> Iterator[None]:
        process_deps._current = self.deps
        try:
            yield
        finally:
            process_deps.reset()

    # -- users and the scheduler --

    def _submit(self) -> None:
        machine = self.job.machine_id + (".od" if self.on_demand else "")
        spec = {
            "job_id": JOB_ID,
            "user": "econ",
            "machine_ids": [machine],
            "trainer": "digits_mlp",
            "nodes": self.job.nodes,
            "max_attempts": MAX_ATTEMPTS,
        }
        self._publish("submit", json.dumps(spec).encode(), delay=0.0)

    def _schedule_tick(self) -> None:
        """Cloud Scheduler's next whole minute, when the queue holds an entry
        due by then (its retry, or the safety net of an attempt placed at once)."""
        entry = self.store.get_queue(JOB_ID)
        if entry is None:
            return
        first = max((entry.not_before - T0).total_seconds(), self.now_s)
        minute = math.floor(first / 60 + 1) * 60
        if self._tick_due is None or minute < self._tick_due or self._tick_due <= self.now_s:
            self._tick_due = minute
            self._at(minute, self._tick)

    def _tick(self) -> None:
        if self._tick_due != self.now_s:
            return  # superseded by an earlier one
        self._tick_due = None
        self.ticks += 1
        self._heartbeats()
        self._publish("reaper_tick", ReaperTick(sent_at=self._clock()), delay=0.0)

    def _clock(self) -> datetime:
        return T0 + timedelta(seconds=self.now_s)

    # -- the agents (modelled) --

    def _wake_agents(self) -> None:
        """An agent for each VM of an attempt not seen before."""
        fresh: dict[int, list[_Vm]] = {}
        for vm in self.cloud.list({MANAGED_LABEL: "true"}):
            if vm["state"] != "RUNNING":
                continue
            assignment = Assignment.model_validate_json(vm["metadata"][JOB_METADATA_KEY])
            if assignment.attempt in self.attempts:
                continue
            rank = assignment.nodes.index(vm["name"]) if assignment.nodes else 0
            token = str(vm["metadata"].get(EVENT_TOKEN_METADATA_KEY, ""))
            fresh.setdefault(assignment.attempt, []).append(
                _Vm(vm["name"], vm["zone"], str(vm["id"]), rank, token)
            )
        for number, vms in fresh.items():
            attempt = _Attempt(number, self.now_s, sorted(vms, key=lambda v: v.rank))
            self.attempts[number] = attempt
            self._at(self.now_s + self.params.boot_s, functools.partial(self._boot, attempt))

    def _common(self, attempt: _Attempt, vm: _Vm) -> dict[str, Any]:
        return {
            "job_id": JOB_ID,
            "attempt": attempt.number,
            "instance": vm.name,
            "sent_at": self._clock(),
            "token": vm.token,
        }

    def _boot(self, attempt: _Attempt) -> None:
        if attempt.lost:
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

    def _finish(self, attempt: _Attempt) -> None:
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
        if attempt is None or node >= len(attempt.vms):
            return
        vm = attempt.vms[node]
        if self.cloud.get(vm.name, vm.zone) is None:
            return  # deleted already (the attempt is being let go)
        self.preemptions += 1
        attempt.lost = True
        if vm.booted and attempt.train_start is not None:
            # The agent: the trainer saves at the end of its step, then it reports.
            progress = self.saved_s + (self.now_s - attempt.train_start)
            self.saved_s = self.params.saved_on_notice(progress)
            step = self._step(self.saved_s)
            report = SpotPreempted(
                **self._common(attempt, vm),
                step=step,
                checkpoint_uri=f"memory://econ/checkpoints/step-{step}",
            )
            self._at(
                self.now_s + self.params.checkpoint_s,
                lambda: self._publish("spot_preempted", report),
            )
        else:
            # Before the agent is up only the log sink reports it.
            self._publish("spot_preempted", log_entry(vm.zone, vm.name, vm.instance_id))
        self._at(self.now_s + self.params.notice_s, lambda: self._terminate(vm))

    def _terminate(self, vm: _Vm) -> None:
        """The notice is over: Compute Engine stops the VM (if still there)."""
        if self.cloud.get(vm.name, vm.zone) is not None:
            self.cloud.preempt(vm.name, notice_s=0.0, zone=vm.zone)

    def _step(self, progress_s: float) -> int:
        return round(progress_s / self.params.step_s)

    # -- the outcome --

    def _outcome(self, end_s: float) -> Outcome:
        job = self.store.get_job(JOB_ID)
        if job is None:
            raise RuntimeError(f"the job was never created: {self.failures}")
        finished = job.status == JobStatus.COMPLETED
        if not finished:
            job = accrue(job, self._clock())
        vm_s = sum(
            r.nodes * ((r.ended_at or self._clock()) - r.started_at).total_seconds()
            for r in job.attempts
        )
        completed = next((h.at for h in job.history if h.status == JobStatus.COMPLETED), None)
        makespan = (completed - job.created_at).total_seconds() if completed else end_s
        return Outcome(
            strategy="all on-demand" if self.on_demand else "spotline",
            cost_usd=job.cost_usd,
            makespan_s=makespan,
            vm_s=vm_s,
            kept_s=self.saved_s if finished else self._kept(end_s),
            preemptions=self.preemptions,
            finished=finished,
        )

    def _kept(self, end_s: float) -> float:
        running = next((a for a in self.attempts.values() if not a.lost), None)
        if running is None or running.train_start is None:
            return self.saved_s
        return self.saved_s + max(0.0, end_s - running.train_start)
