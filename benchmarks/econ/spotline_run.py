"""A job run through spotline's real code, on a virtual clock.

What is real: the handlers (``submit_job``, ``on_vm_booted``,
``on_epoch_done``, ``on_spot_preempted``, ``on_job_finished``, ``reaper``)
through their Pub/Sub wrapper with real CloudEvents, and everything under them
(admission, placement, the gang insert, recovery, the queue, pricing); the
in-memory store; google-cloud-compute's client against the local cloud
(``spotline.infra.localcloud``), whose VMs are records.

What is modelled: each VM's agent and trainer (``agents``: with
``replace_one`` a gang's survivors wait for the regroup the functions write,
and restart from the save), and Compute
Engine's time (``cloud_time``). Every event reaches its function
``deliver_s`` after it is published; each delivery runs on its own clock
(functions run side by side), which a delete spotline waits for moves on. The
VMs bill from their insert until they are gone; the cost reported is that
time at the price spotline placed them at. Cloud Scheduler's tick runs the
reaper on the whole minute after anything waits in the queue, and each
minute while a gang replaces a node (the reaper has nothing else to do here:
every loss is reported).
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

from benchmarks.econ.agents import JOB_ID, Attempt, ModelledAgents, Vm
from benchmarks.econ.breakdown import Breakdown, Stop, breakdown
from benchmarks.econ.cloud_time import TimedCompute
from benchmarks.econ.model import Job, Outcome, Params
from benchmarks.econ.traces import Trace
from benchmarks.econ.wire import PROJECT, cloud_event, settings
from spotline.functions import deps as process_deps
from spotline.functions.deps import Deps
from spotline.functions.handlers.on_epoch_done import on_epoch_done
from spotline.functions.handlers.on_job_finished import on_job_finished
from spotline.functions.handlers.on_spot_preempted import on_spot_preempted
from spotline.functions.handlers.on_vm_booted import on_vm_booted
from spotline.functions.handlers.reaper import reaper
from spotline.functions.handlers.reaper_page import reaper_page
from spotline.functions.handlers.submit_job import submit_job
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.infra.localcloud.quotas import DEFAULT_LIMITS
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.adapters.recording_bus import RecordingBus
from spotline.shared.contract.events import (
    ReaperTick,
)
from spotline.shared.domain.bounds import MAX_ATTEMPTS
from spotline.shared.domain.pricing import vm_cost
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobStatus

T0 = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
# The job's default bound for a replacement to join.
REPLACE_NODE_TIMEOUT_S = JobSpec.model_fields["replace_node_timeout_s"].default
HANDLERS: dict[str, Callable[[Any], None]] = {
    "submit": submit_job,
    "vm_booted": on_vm_booted,
    "epoch_done": on_epoch_done,
    "job_finished": on_job_finished,
    "spot_preempted": on_spot_preempted,
    "reaper_tick": reaper,
    "reaper_page": reaper_page,
}


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    action: Callable[[], None] = field(compare=False)


class SpotlineRun(ModelledAgents):
    """One job, one trace, spotline's handlers; ``run()`` gives the outcome.

    Args:
        on_demand: place the job on the machine's on-demand twin (``ID.od``):
            Compute Engine never preempts it, so the trace does not apply.
        replace_one: a gang's lost node is replaced within its attempt (the
            job's default ``replace_node_timeout_s``); otherwise (0) the gang
            is relaunched whole on any node's loss.
        min_nodes: with ``replace_one``, the job's ``min_nodes`` (an elastic
            gang: its survivors train on at their size while the lost node's
            replacement boots); None: the gang waits for it.
        boots: the insert -> training time of each of so many VMs, drawn
            as they are inserted (default: ``params.boot_s`` each).
    """

    def __init__(
        self,
        job: Job,
        trace: Trace,
        params: Params,
        *,
        on_demand: bool = False,
        replace_one: bool = False,
        min_nodes: int | None = None,
        boots: Callable[[int], list[float]] | None = None,
    ) -> None:
        if min_nodes is not None and not replace_one:
            raise ValueError("min_nodes: an elastic gang replaces its lost node; set replace_one")
        self.job, self.trace, self.params = job, trace, params
        self.boots = boots or (lambda count: [params.boot_s] * count)
        self.on_demand = on_demand
        self.min_nodes = min_nodes
        self.regroup_wait_s = float(REPLACE_NODE_TIMEOUT_S if replace_one else 0)
        self.events: list[_Event] = []
        self._seq = itertools.count()
        self._ids = itertools.count(1)
        self.now_s = 0.0
        self.saved_s = 0.0
        self.attempts: dict[int, Attempt] = {}
        self.known: dict[str, Vm] = {}
        self.preemptions = 0
        self.replacements = 0
        self.stops: list[Stop] = []
        self.ticks = 0
        self._tick_due: float | None = None
        self.failures: list[str] = []
        self._elapsed = 0.0  # the running delivery's own time, from now_s
        self._bus_read = 0  # what the functions published, delivered up to here

    # -- the world --

    def run(self) -> Outcome:
        limits = {metric: 1e9 for metric in DEFAULT_LIMITS}
        with LocalCloud(PROJECT, RecordLauncher(), stop_grace_s=0.0, quota_limits=limits) as cloud:
            self.cloud = cloud
            self.store = InMemoryStore()
            self.bus = RecordingBus(PROJECT)
            self.compute = TimedCompute(
                GceCompute(
                    PROJECT, api_endpoint=cloud.endpoint, operation_timeout_s=5.0, read_retry_s=1.0
                ),
                now=self._local_s,
                done_at=self._delete_done_s,
                wait=self._waited,
            )
            self.deps = Deps(
                settings(cloud.endpoint),
                store=self.store,
                compute=self.compute,
                bus=self.bus,
                clock=self._clock,
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
                self._elapsed = 0.0
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
        ended = {r.attempt for r in self._job_attempts() if r.ended_at is not None}
        with self._installed(), contextlib.redirect_stdout(io.StringIO()):
            try:
                HANDLERS[topic](event)
            except Exception as err:  # a 500: the simulation says so, it does not retry
                self.failures.append(f"{topic} at {self.now_s:.1f} s: {err!r}")
        for record in self._job_attempts():
            attempt = self.attempts.get(record.attempt)
            if record.ended_at is None or record.attempt in ended or attempt is None:
                continue
            if attempt.stop is not None:  # this delivery recorded the loss
                attempt.stop.recorded_s = (record.ended_at - T0).total_seconds()
                attempt.stop.teardown_s = self._elapsed
        self._fan_out()
        self._wake_agents()
        self._regroups()
        self._grow_requests()
        self._schedule_tick()

    def _fan_out(self) -> None:
        """The reaper's pages, which its tick published, to their function."""
        published = self.bus.published
        for topic, event in published[self._bus_read :]:
            if topic == "reaper_page":
                self._publish(topic, event)
        self._bus_read = len(published)

    def _job_attempts(self) -> list[Any]:
        job = self.store.get_job(JOB_ID)
        return list(job.attempts) if job is not None else []

    def _local_s(self) -> float:
        """The running delivery's time: a function waiting on Compute Engine
        moves its own clock, not the world's."""
        return self.now_s + self._elapsed

    def _waited(self, seconds: float) -> None:
        self._elapsed += seconds

    def _delete_done_s(self, name: str, sent_s: float) -> float:
        """When a delete sent at ``sent_s`` has VM ``name`` gone: at once if
        Compute Engine has it stopped already or never had it."""
        vm = self.known.get(name)
        found = self.cloud.get(name, vm.zone) if vm is not None else None
        if found is None or found["state"] != "RUNNING":
            return sent_s
        return self.params.delete_done_s(sent_s, vm.noticed_s if vm else None)

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
            # 0: a gang is relaunched whole on any node's loss.
            "replace_node_timeout_s": int(self.regroup_wait_s),
        }
        if self.min_nodes is not None:
            spec["min_nodes"] = self.min_nodes
        self._publish("submit", json.dumps(spec).encode(), delay=0.0)

    def _schedule_tick(self) -> None:
        """Cloud Scheduler's next whole minute, when the queue holds an entry
        due by then (its retry, or the safety net of an attempt placed at
        once), or while a gang replaces a node (the reaper tends it)."""
        entry = self.store.get_queue(JOB_ID)
        job = self.store.get_job(JOB_ID)
        if entry is not None:
            first = max((entry.not_before - T0).total_seconds(), self.now_s)
        elif job is not None and job.replacing is not None:
            first = self.now_s
        else:
            return
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
        return T0 + timedelta(seconds=self._local_s())

    # -- the outcome --

    def _outcome(self, end_s: float) -> Outcome:
        """The VMs' billed time at the catalog price spotline placed them at
        (from their insert until they were gone: spotline's own ``cost_usd``
        stops at the loss or the end it records, before its deletes)."""
        job = self.store.get_job(JOB_ID)
        if job is None:
            raise RuntimeError(f"the job was never created: {self.failures}")
        finished = job.status == JobStatus.COMPLETED
        completed = next((h.at for h in job.history if h.status == JobStatus.COMPLETED), None)
        makespan = (completed - job.created_at).total_seconds() if completed else end_s
        billing = self.compute.billing
        vm_s = billing.vm_s(max([self._local_s(), *billing.gone.values()]) if finished else end_s)
        price = job.attempts[0].price_per_hour if job.attempts else 0.0
        return Outcome(
            strategy=self.strategy,
            cost_usd=vm_cost(price, vm_s),
            makespan_s=makespan,
            vm_s=vm_s,
            kept_s=self.saved_s if finished else self._kept(end_s),
            preemptions=self.preemptions,
            finished=finished,
            breakdown=self.breakdown(),
        )

    @property
    def strategy(self) -> str:
        if self.on_demand:
            return "all on-demand"
        if self.min_nodes is not None:
            return "spotline, elastic"
        return "spotline, replace-one" if self.regroup_wait_s else "spotline"

    def breakdown(self) -> Breakdown:
        """Where the time past an on-demand run went, stop by stop."""
        return breakdown(
            self.stops,
            {a.number: a.started for a in self.attempts.values()},
            {a.number: a.train_start for a in self.attempts.values()},
            self.params.boot_s,
        )

    def _kept(self, end_s: float) -> float:
        running = next((a for a in self.attempts.values() if a.training), None)
        if running is None or running.train_start is None:
            return self.saved_s
        return self.saved_s + max(0.0, end_s - running.train_start)
