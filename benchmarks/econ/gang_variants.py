"""Two recovery policies a careful engineer would try next, in the model
(``gang_model``), on the same traces and seeded boot draws; neither is
built in spotline.

* ``elastic, growing only when it pays``: an elastic gang grows back only if
  the time the bigger gang saves over the work it can expect to do before
  the next loss (or before the end) exceeds the cost of a change of size
  (the save, its report, the restart). A gang that does not grow trains on;
  the replacement, up and billed, joins at the gang's next change of size.
* ``replace-one, warm spare``: one more Spot VM than the gang, booted and
  idle (billed). On a loss the spare takes the lost rank, and a new spare is
  inserted for it; the gang waits for the loss's report, the restore gate
  (the lost VM gone at its notice's end: the save on the notice is then
  complete) and the restart, not for a boot. The spare's slot has its own
  preemptions: the trace needs ``nodes + 1`` nodes (``traces.poisson`` with
  one more node gives the gang's nodes the same preemptions).
"""

from __future__ import annotations

import math
import random

from benchmarks.econ import traces
from benchmarks.econ.gang_model import GrowRule, Latencies, elastic, spot_outcome, whole_steps
from benchmarks.econ.gang_overhead import Overhead
from benchmarks.econ.model import Job, Outcome
from benchmarks.econ.traces import Trace

GROW_WHEN_IT_PAYS = "elastic, growing only when it pays"
WARM_SPARE = "replace-one, warm spare"


def grow_when_it_pays(lat: Latencies, rate_per_vm_h: float, nodes: int) -> GrowRule:
    """The rule: grow from ``size`` to ``bigger`` of ``nodes`` only if
    ``work * nodes * (1/size - 1/bigger)`` (the wall seconds the bigger gang
    saves on ``work``) exceeds a change of size's cost, where ``work`` is
    what the bigger gang does before the next loss expected
    (``3600 / (nodes * rate_per_vm_h)`` seconds away) or what is left."""
    change_s = lat.checkpoint_s + lat.deliver_s + lat.restart_s
    next_loss_s = 3600 / (nodes * rate_per_vm_h) if rate_per_vm_h > 0 else math.inf

    def grows(remaining_s: float, size: int, bigger: int) -> bool:
        work = min(remaining_s, next_loss_s * bigger / nodes)
        return work * nodes * (1 / size - 1 / bigger) > change_s

    return grows


def growing_when_it_pays(
    job: Job, trace: Trace, lat: Latencies, seed: int, rate_per_vm_h: float
) -> tuple[Outcome, Overhead]:
    """The elastic strategy with ``grow_when_it_pays``."""
    rule = grow_when_it_pays(lat, rate_per_vm_h, job.nodes)
    return elastic(GROW_WHEN_IT_PAYS, job, trace, lat, seed, rule)


def declined_grows(job: Job, lat: Latencies, rate_per_vm_h: float, seeds: int) -> tuple[int, int]:
    """How many grows ``grow_when_it_pays`` declined, of how many a gang
    was asked, over seeds 1..``seeds``."""
    rule = grow_when_it_pays(lat, rate_per_vm_h, job.nodes)
    answers: list[bool] = []

    def counted(remaining_s: float, size: int, bigger: int) -> bool:
        answers.append(rule(remaining_s, size, bigger))
        return answers[-1]

    for seed in range(1, seeds + 1):
        trace = traces.poisson(rate_per_vm_h, job.nodes, lat.max_hours, seed)
        elastic(GROW_WHEN_IT_PAYS, job, trace, lat, seed, counted)
    return answers.count(False), len(answers)


def warm_spare(job: Job, trace: Trace, lat: Latencies, seed: int) -> tuple[Outcome, Overhead]:
    """Replace-one with a warm spare (see the module's docstring), and where
    its makespan beyond on demand went (the causes add up to it).

    Slot ``job.nodes`` starts as the spare; ``ranks[r]`` is the slot holding
    rank r; ``up[s]`` is when slot s's VM can train, ``since[s]`` when it
    was inserted (it bills from then). The gang's first boot draws are the
    on-demand run's, so it starts when that run does."""
    n = job.nodes
    rng = random.Random(seed)
    spent = Overhead()
    events = [(p.t_h * 3600, p.node) for p in trace.for_nodes(n + 1)]
    limit = lat.max_hours * 3600
    since = [0.0] * (n + 1)
    up = [lat.insert_s + b for b in lat.boots(rng, n + 1)]
    ranks, spare = list(range(n)), n
    resume = max(up[:n])
    progress, vm_s, preemptions = 0.0, 0.0, 0
    for hit, slot in [*events, (math.inf, 0)]:
        end = resume + job.work_s - progress
        if min(hit, end) >= limit:
            vm_s += sum(limit - s for s in since)
            kept = progress + max(0.0, limit - resume)
            return spot_outcome(WARM_SPARE, job, vm_s, limit, kept, preemptions, False), spent
        if end <= hit:
            done = end + lat.deliver_s
            vm_s += sum(done + lat.delete_s - s for s in since)
            return spot_outcome(WARM_SPARE, job, vm_s, done, job.work_s, preemptions, True), spent
        if hit < since[slot]:
            continue  # no VM in that slot then: the next one was not inserted yet
        preemptions += 1
        vm_s += hit + lat.notice_s - since[slot]  # Compute Engine takes it at the notice's end
        if slot == spare:  # the idle spare's loss, reported: a new spare
            since[slot] = hit + lat.deliver_s
            up[slot] = since[slot] + lat.insert_s + lat.boots(rng, 1)[0]
            continue
        rank = ranks.index(slot)
        training = hit > resume
        if training:
            reached = progress + hit - resume
            progress = whole_steps(reached, lat.step_s)
            spent.add(lost_s=reached - progress)
        wrote = (lat.checkpoint_s if rank == 0 else lat.step_s) if training else 0.0
        reported = hit + wrote + lat.deliver_s
        ranks[rank], spare = spare, slot  # the spare takes the rank; a new spare is inserted
        since[slot] = reported
        up[slot] = reported + lat.insert_s + lat.boots(rng, 1)[0]
        gone = hit + lat.notice_s  # the restore gate: the lost VM gone
        booted = max(up[s] for s in ranks) + lat.deliver_s  # a rank's VM still booting, reported
        waited = resume
        resume = max(reported, gone, booted) + lat.restart_s
        if not training:
            spent.add(overlap_s=resume - waited)
            continue
        gated = max(reported, gone)
        spent.add(heard_s=reported - hit, gate_s=gated - reported, restart_s=lat.restart_s)
        spent.add(boot_s=resume - lat.restart_s - gated)
    raise AssertionError("unreachable: the last event is at infinity")
