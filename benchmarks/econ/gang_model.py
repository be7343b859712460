"""Multi-node jobs under preemption, with Compute Engine's latencies: how a
gang is recovered decides its cost and makespan.

Strategies, all on the same traces and the same seeded boot times:

* ``relaunch``: what spotline does for gangs of other frameworks (and with
  ``replace_node_timeout_s`` 0): any node's notice stops the gang (rank 0
  saves), and a whole new gang is inserted as soon as the report is handled,
  while the old nodes are deleted; it restores once they are gone
  (``spotline.shared.domain.restore_gate``).
* ``relaunch, waiting for deletes``: the same, the new gang inserted only
  once every old node's delete returned (spotline before the restore gate).
* ``replace-one``: what spotline does for ``pytorch``, ``command``, ``xgboost``,
  ``ray``, ``jax`` and ``tensorflow`` gangs
  (``spotline.shared.domain.node_replacement``): the survivors stay (idle,
  billed), one replacement is inserted, and every rank restarts from the save
  when it has booted. ``gang_handlers`` runs it through the handlers on the
  same traces, to compare.
* ``elastic``: what spotline does for ``pytorch`` and ``command`` gangs with
  ``min_nodes`` (here half the gang): as replace-one, but the survivors train
  on at the smaller size while the replacement boots, and the gang grows back
  when it joins; each change of size is a restart from a save.
* ``poller, checkpoint every P``: a SkyPilot-like controller (tears the
  cluster down and relaunches it whole, ``sky/jobs/recovery_strategy.py``)
  with the user's periodic checkpoint every 60 s, 10 min or 30 min.

Capacity is always there (no strategy waits for it; replace-one's fallback to
a whole relaunch is never needed). Work is counted in seconds of the whole
gang: at k of n nodes, a second of training does k/n of a second's work.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.econ.gang_overhead import Overhead
from benchmarks.econ.model import Job, Outcome
from benchmarks.econ.traces import Trace
from spotline.shared.domain.pricing import vm_cost


@dataclass(frozen=True)
class Latencies:
    """Compute Engine's and Google's timings, in seconds (sources in ``SOURCES``).

    Attributes:
        deliver_s: an event's publish -> its Cloud Function acting on it.
        insert_s: an insert (or bulk insert) call -> the VM RUNNING.
        boot_median_s, boot_sigma: RUNNING -> training (guest boot, GPU
            driver, agent, code and data), drawn per VM from a log-normal
            distribution; a gang starts when its slowest node is up.
        notice_s: a Spot VM's preemption notice; Compute Engine takes it then.
        delete_s: a delete call -> the VM gone (billing stops): the guest's
            shutdown, which the agent's unit uses, and the operation.
        checkpoint_s: the save on the notice (rank 0's, for a gang).
        step_s: one optimizer step: the notice's save waits for its end.
        restart_s: ranks restarted in place from the save (replace-one and
            elastic: a new process group, the state read back).
        detect_s: the poller's sight of a VM gone.
        periodic_stall_s: the training stall of one periodic checkpoint
            (an asynchronous save: only the copy of the state off the GPU).
        max_hours: a run not finished by then is cut off.
    """

    deliver_s: float = 2.0
    insert_s: float = 10.0
    boot_median_s: float = 75.0
    boot_sigma: float = 0.35
    notice_s: float = 30.0
    delete_s: float = 35.0
    checkpoint_s: float = 10.0
    step_s: float = 1.0
    restart_s: float = 20.0
    detect_s: float = 15.0
    periodic_stall_s: float = 2.0
    max_hours: float = 168.0

    def boots(self, rng: random.Random, count: int) -> list[float]:
        # Log-normal about the median (the draws of rng.lognormvariate, which
        # takes the median's log and so no median of 0 s).
        return [
            self.boot_median_s * math.exp(rng.normalvariate(0.0, self.boot_sigma))
            for _ in range(count)
        ]


SOURCES = {
    "deliver_s": "assumption: Pub/Sub push delivery (well under a second, Google's Pub/Sub "
    "docs: publish and end-to-end latency, cloud.google.com/pubsub/docs/topic-troubleshooting) "
    "plus a Cloud Function's cold start (seconds); no public measurement found, so 2 s",
    "insert_s": "public measurement: ~23-25 s request -> SSH for VMs up to 32 vCPUs "
    "(R. Aboukhalil, 'Move Fast and Break the Cloud', 2018, ~5,000 VMs); 41.5 s for "
    "2 vCPU (C. McAnlis, 'Understanding and Profiling GCE cold-boot time', 2017): "
    "the insert's share assumed 10 s",
    "boot_median_s": "assumption built on those: guest boot, the GPU driver's load, the "
    "agent, code and data from storage (the rest of the 90 s the economics model assumes)",
    "boot_sigma": "assumption: log-normal shape, p95 = 1.78 x median",
    "notice_s": "Compute API Scheduling.skipGuestOsShutdown: 30 s between ACPI G2 Soft "
    "Off and G3 Mechanical Off for Spot VMs (120 s for standard VMs)",
    "delete_s": "the same: a Spot VM's guest gets 30 s to shut down (the agent's unit "
    "takes up to 28 s), plus ~5 s for the operation",
    "checkpoint_s": "assumption: rank 0's save on the notice (must fit in it)",
    "step_s": "assumption: one optimizer step",
    "restart_s": "assumption: torchrun restarting the ranks from a save, in place",
    "detect_s": "SkyPilot's managed-job controller polls its job's status every 15 s "
    "(sky/jobs/utils.py JOB_STATUS_CHECK_GAP_SECONDS; 20 s in earlier releases): a loss "
    "is seen within one gap",
    "periodic_stall_s": "assumption: an asynchronous checkpoint (torch.distributed."
    "checkpoint.async_save) stalls training only for the copy off the GPU",
    "max_hours": "the simulation's cut-off",
}
# The poller's checkpoint periods a careful user might pick.
PERIODS_S = (60.0, 600.0, 1800.0)
RELAUNCH = "relaunch (spotline)"
RELAUNCH_WAITING = "relaunch, waiting for deletes (before)"
REPLACE_ONE = "replace-one"
ELASTIC = "elastic (min_nodes n/2)"


# Whether a smaller gang grows back: (work left in seconds, its size, the size it would grow to).
GrowRule = Callable[[float, int, int], bool]


def poller_name(period_s: float) -> str:
    return f"poller, checkpoint every {period_s / 60:g} min"


STRATEGIES = (RELAUNCH, RELAUNCH_WAITING, REPLACE_ONE, ELASTIC, *map(poller_name, PERIODS_S))


def on_demand(job: Job, lat: Latencies, seed: int) -> Outcome:
    """No preemption, the on-demand price: the gang boots (its slowest node),
    trains, and is deleted once the finish is handled."""
    start = lat.insert_s + max(lat.boots(random.Random(seed), job.nodes))
    done = start + job.work_s + lat.deliver_s
    vm_s = job.nodes * (done + lat.delete_s)
    cost = vm_cost(job.machine.on_demand_usd_per_hour, vm_s)
    return Outcome("all on-demand", cost, done, vm_s, job.work_s, 0, True)


def run(strategy: str, job: Job, trace: Trace, lat: Latencies, seed: int) -> Outcome:
    """One run of ``strategy`` (one of ``STRATEGIES``) on Spot VMs."""
    return explained(strategy, job, trace, lat, seed)[0]


def explained(
    strategy: str, job: Job, trace: Trace, lat: Latencies, seed: int
) -> tuple[Outcome, Overhead]:
    """One run of ``strategy``, and where its makespan beyond on demand went
    (of a finished run: the causes add up to it)."""
    rng = random.Random(seed)  # the same boot draws for every strategy, in the same order
    spent = Overhead()
    if strategy in (RELAUNCH, RELAUNCH_WAITING):
        waits = strategy == RELAUNCH_WAITING
        return _relaunch(strategy, job, trace, lat, rng, spent, wait_deletes=waits), spent
    if strategy == REPLACE_ONE:
        return _in_place(strategy, job, trace, lat, rng, spent, min_nodes=job.nodes), spent
    if strategy == ELASTIC:
        return elastic(strategy, job, trace, lat, seed)
    for period in PERIODS_S:
        if strategy == poller_name(period):
            return _poller(strategy, job, trace, lat, rng, spent, period), spent
    raise ValueError(f"unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)})")


def elastic(
    name: str,
    job: Job,
    trace: Trace,
    lat: Latencies,
    seed: int,
    grows: GrowRule | None = None,
) -> tuple[Outcome, Overhead]:
    """The elastic strategy (``min_nodes`` half the gang), and where its
    makespan went. ``grows(remaining_s, size, bigger)``, when given, decides
    whether a smaller gang grows back from ``size`` to ``bigger`` nodes with
    ``remaining_s`` of the job's work left (by default it always does); a
    gang that does not trains on, and the replacement joins at the gang's
    next change of size."""
    spent = Overhead()
    least = elastic_min_nodes(job.nodes)
    rng = random.Random(seed)
    return _in_place(name, job, trace, lat, rng, spent, min_nodes=least, grows=grows), spent


def elastic_min_nodes(nodes: int) -> int:
    """The elastic strategy's ``min_nodes``: half the gang."""
    return max(1, nodes // 2)


def _relaunch(
    name: str,
    job: Job,
    trace: Trace,
    lat: Latencies,
    rng: random.Random,
    spent: Overhead,
    *,
    wait_deletes: bool,
) -> Outcome:
    """The whole gang goes at any node's notice; rank 0 saves on it."""

    def lost(hit: float, node: int, trained: bool) -> tuple[float, float, float]:
        wrote = (lat.checkpoint_s if node == 0 else lat.step_s) if trained else 0.0
        reported = hit + wrote + lat.deliver_s
        gone = max(hit + lat.notice_s, reported + lat.delete_s)  # every old node
        return reported, reported + lat.delete_s, gone if wait_deletes else reported

    return _whole_gang(
        name, job, trace, lat, rng, spent, lost, lambda progress, saved: progress, 0.0
    )


def _poller(
    name: str,
    job: Job,
    trace: Trace,
    lat: Latencies,
    rng: random.Random,
    spent: Overhead,
    period_s: float,
) -> Outcome:
    """The VM is seen gone after its notice; the rest of the cluster is torn
    down, then relaunched. Only the last periodic checkpoint is kept."""

    def lost(hit: float, node: int, trained: bool) -> tuple[float, float, float]:
        detected = hit + lat.notice_s + lat.detect_s
        others_gone = detected + lat.delete_s
        return detected, others_gone, others_gone if job.nodes > 1 else detected

    def kept(progress: float, saved: float) -> float:
        return max(saved, math.floor(progress / period_s + 1e-9) * period_s)

    stall = lat.periodic_stall_s / period_s  # wall seconds lost per second of progress
    return _whole_gang(name, job, trace, lat, rng, spent, lost, kept, stall)


def _whole_gang(
    name: str,
    job: Job,
    trace: Trace,
    lat: Latencies,
    rng: random.Random,
    spent: Overhead,
    lost: Callable[[float, int, bool], tuple[float, float, float]],
    kept: Callable[[float, float], float],
    stall: float,
) -> Outcome:
    """A gang lost whole at each hit. ``lost(hit, node, trained)`` gives when
    the loss is acted on, when the other nodes are gone, and when the next
    gang is inserted; ``kept(progress, saved)`` the progress saved; each
    second of progress takes ``1 + stall`` seconds."""
    events = [(p.t_h * 3600, p.node) for p in trace.for_nodes(job.nodes)]
    limit = lat.max_hours * 3600
    saved = vm_s = 0.0
    start, gate, preemptions, i = 0.0, 0.0, 0, 0
    while True:
        booted = start + lat.insert_s + max(lat.boots(rng, job.nodes))
        train = max(booted, gate)
        end = train + (job.work_s - saved) * (1 + stall)
        while i < len(events) and events[i][0] < start:
            i += 1
        hit, node = events[i] if i < len(events) else (math.inf, 0)
        if start == 0:
            spent.add(boot_s=-booted)  # the first boot is the on-demand run's too
        until = min(hit, train)
        spent.add(boot_s=min(until, booted) - start, gate_s=max(0.0, until - booted))
        if hit >= end and end <= limit:
            done = end + lat.deliver_s
            vm_s += job.nodes * (done + lat.delete_s - start)
            spent.add(stall_s=job.work_s * stall)
            return spot_outcome(name, job, vm_s, done, job.work_s, preemptions, True)
        if hit >= limit:
            vm_s += job.nodes * (limit - start)
            return spot_outcome(name, job, vm_s, limit, saved, preemptions, False)
        preemptions += 1
        trained = hit > train
        if trained:
            progress = saved + (hit - train) / (1 + stall)
            saved = kept(whole_steps(progress, lat.step_s), saved)
            spent.add(lost_s=(progress - saved) * (1 + stall))
        acted, others_gone, next_start = lost(hit, node, trained)
        noticed_gone = hit + lat.notice_s
        vm_s += (noticed_gone - start) + (job.nodes - 1) * (others_gone - start)
        gate = max(noticed_gone, others_gone)  # the next gang restores after every old node
        start = max(next_start, acted)
        spent.add(heard_s=acted - hit, delete_wait_s=start - acted)
        i += 1


def _in_place(
    name: str,
    job: Job,
    trace: Trace,
    lat: Latencies,
    rng: random.Random,
    spent: Overhead,
    *,
    min_nodes: int,
    grows: GrowRule | None = None,
) -> Outcome:
    """The survivors stay; each lost node is replaced alone, in its slot.

    Replace-one (``min_nodes`` = the gang's size): the ranks stop at the
    notice (rank 0 saves), wait for the replacement, and every rank restarts
    from the save once it is up. Elastic (fewer): the survivors restart at
    once at the smaller size, and the gang grows back (a save, a restart)
    each time a replacement is up; below ``min_nodes`` it waits.

    The functions act on each report ``deliver_s`` after it is sent: node
    0's save (an elastic gang shrinks then), the replacement's boot (the
    gang regroups, or an elastic gang is asked to stop and grow back, then),
    the smaller gang's save on that request.

    The training runs from ``resume`` on ``size`` nodes (a second does
    size/n of a second's work); ``up[k]`` is when slot k's VM can train,
    ``since[k]`` when it was inserted (it bills from then)."""
    n = job.nodes
    events = [(p.t_h * 3600, p.node) for p in trace.for_nodes(n)]
    limit = lat.max_hours * 3600
    since = [0.0] * n
    up = [lat.insert_s + b for b in lat.boots(rng, n)]
    resume, size = max(up), n  # a gang starts whole
    progress, vm_s, preemptions, i = 0.0, 0.0, 0, 0
    declined = -math.inf  # the last replacement's boot a smaller gang did not grow for
    while True:
        rate = size / n if size >= min_nodes else 0.0
        end = resume + (job.work_s - progress) / rate if rate else math.inf
        # An elastic gang is asked to grow back once a replacement's boot is heard.
        after = max(resume, declined)
        grow = min((t for t in up if t > after), default=math.inf) if size < n else math.inf
        grow += lat.deliver_s
        hit, node = events[i] if i < len(events) else (math.inf, 0)
        if min(hit, grow, end) >= limit:
            vm_s += sum(limit - s for s in since)
            kept = progress + max(0.0, limit - resume) * rate
            return spot_outcome(name, job, vm_s, limit, kept, preemptions, False)
        if end <= min(hit, grow):
            spent.add(smaller_s=(end - resume) * (1 - rate))
            done = end + lat.deliver_s
            vm_s += sum(done + lat.delete_s - s for s in since)
            return spot_outcome(name, job, vm_s, done, job.work_s, preemptions, True)
        if grow < hit and grows is not None and rate:
            change_s = lat.checkpoint_s + lat.deliver_s + lat.restart_s
            bigger = sum(1 for t in up if t <= grow + change_s)
            if not grows(job.work_s - progress - (grow - resume) * rate, size, bigger):
                declined = grow - lat.deliver_s
                continue
        if grow < hit:  # a replacement is up: stop at a step, save, restart bigger
            progress += (grow - resume) * rate
            spent.add(smaller_s=(grow - resume) * (1 - rate) if rate else 0.0)
            spent.add(resize_s=lat.checkpoint_s + lat.deliver_s + lat.restart_s)
            resume = grow + lat.checkpoint_s + lat.deliver_s + lat.restart_s
            size = sum(1 for t in up if t <= resume)
            continue
        i += 1
        if hit < since[node]:
            continue  # no VM in that slot then: the replacement was not inserted yet
        preemptions += 1
        bystander = min_nodes < n and up[node] > resume and hit > resume
        training = hit > resume and up[node] <= resume
        if training:
            reached = progress + (hit - resume) * rate
            progress = whole_steps(reached, lat.step_s)
            spent.add(lost_s=reached - progress, smaller_s=(hit - resume) * (1 - rate))
        wrote = (lat.checkpoint_s if node == 0 else lat.step_s) if training else 0.0
        reported = hit + wrote + lat.deliver_s
        vm_s += hit + lat.notice_s - since[node]  # Compute Engine takes it at the notice's end
        since[node] = reported
        # The replacement restores once the lost VM is gone (the restore gate).
        booted = reported + lat.insert_s + lat.boots(rng, 1)[0]
        up[node] = max(booted, hit + lat.notice_s)
        if bystander:
            continue  # an elastic gang trains on without the slot it was waiting for
        waited = resume
        shrinks = min_nodes < n and sum(1 for t in up if t <= hit) >= min_nodes
        if shrinks:
            saved = hit + lat.checkpoint_s + lat.deliver_s  # rank 0's save, reported
            resume = max(saved, resume) + lat.restart_s
        elif min_nodes < n:
            resume = sorted(up)[min_nodes - 1] + lat.deliver_s + lat.restart_s
        else:
            resume = max(up) + lat.deliver_s + lat.restart_s  # the last boot, reported
        size = sum(1 for t in up if t <= resume)
        _charge_stop(spent, lat, hit, reported, booted, up[node], waited, resume, shrinks)


def _charge_stop(
    spent: Overhead,
    lat: Latencies,
    hit: float,
    reported: float,
    booted: float,
    up: float,
    waited: float,
    resume: float,
    shrinks: bool,
) -> None:
    """Charge the gang's wait from a loss at ``hit`` to its ``resume``: a
    gang that trained until then waits to hear of it (``reported``), for
    the replacement's boot (``booted``) and its restore gate (``up``), and
    the restart; an elastic one that shrinks, for the save and restart. A
    gang that was waiting already (until ``waited``) waits longer."""
    if hit <= waited:
        spent.add(overlap_s=resume - waited)
    elif shrinks:
        spent.add(resize_s=resume - hit)
    else:
        boot = min(booted, up) - reported
        gate = up - min(booted, up)
        rest = resume - lat.restart_s - lat.deliver_s - up  # another slot's VM still booting
        heard = reported - hit + lat.deliver_s  # the loss's report, and the boot's
        spent.add(heard_s=heard, boot_s=boot, gate_s=gate, overlap_s=rest)
        spent.add(restart_s=lat.restart_s)


def whole_steps(progress: float, step_s: float) -> float:
    """The notice's save keeps the steps done; the one in progress is lost."""
    return math.floor(progress / step_s + 1e-9) * step_s


def spot_outcome(
    name: str, job: Job, vm_s: float, makespan_s: float, kept_s: float, preemptions: int, done: bool
) -> Outcome:
    cost = vm_cost(job.machine.spot_usd_per_hour, vm_s)
    return Outcome(name, cost, makespan_s, vm_s, kept_s, preemptions, done)
