"""A gang's relaunch, replace-one and elastic through spotline's real handlers
(``spotline_run``), beside the model's figures (``gang_model``) for the same
cells: the same traces, the same latencies and the same boot draws, so a
reader sees whether the model and the handlers agree.

The handler runs take the model's latencies (``params_of``): an event's
delivery, a delete, the notice, rank 0's save, a step, the ranks' restart
after a regroup; each VM's insert -> training is the model's insert plus a
boot drawn from its distribution, from the same seeded generator, in the
order the VMs are inserted (a gang waits for its slowest node). Where the
handlers choose differently from the model, the draws after that differ.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from benchmarks.econ import gang_model, traces
from benchmarks.econ.gang_model import Latencies
from benchmarks.econ.model import Job, Params
from benchmarks.econ.spotline_run import SpotlineRun


@dataclass(frozen=True)
class Handled:
    """How a strategy's job asks spotline for it: a lost node replaced
    within its attempt, and the smaller gang's least size (elastic)."""

    replace_one: bool
    elastic: bool = False

    def min_nodes(self, nodes: int) -> int | None:
        """The job's ``min_nodes``: the model's (half the gang), or None."""
        return gang_model.elastic_min_nodes(nodes) if self.elastic else None


HANDLED = {
    gang_model.RELAUNCH: Handled(replace_one=False),
    gang_model.REPLACE_ONE: Handled(replace_one=True),
    gang_model.ELASTIC: Handled(replace_one=True, elastic=True),
}


def params_of(lat: Latencies) -> Params:
    """The handler runs' timings, the model's (the boot: its median, when not drawn)."""
    return Params(
        boot_s=lat.insert_s + lat.boot_median_s,
        notice_s=lat.notice_s,
        checkpoint_s=lat.checkpoint_s,
        step_s=lat.step_s,
        deliver_s=lat.deliver_s,
        delete_s=lat.delete_s,
        restart_s=lat.restart_s,
        detect_s=lat.detect_s,
        max_hours=lat.max_hours,
    )


def boot_draws(lat: Latencies, seed: int) -> Callable[[int], list[float]]:
    """Insert -> training of so many VMs, drawn as the model draws them."""
    rng = random.Random(seed)
    return lambda count: [lat.insert_s + boot for boot in lat.boots(rng, count)]


@dataclass(frozen=True)
class Agreement:
    """One cell and strategy: the handlers' means beside the model's, in
    percent against each one's own on-demand run, over the same seeds."""

    gpu: str
    nodes: int
    rate: float
    strategy: str
    savings: float  # the handlers'
    makespan: float
    model_savings: float
    model_makespan: float
    preemptions: float  # mean per run, the handlers'
    replacements: float  # replacement VMs inserted, mean per run
    finished: int
    runs: int


def compare(
    gpu: str,
    machine_id: str,
    nodes: int,
    rate: float,
    hours: float,
    seeds: int,
    lat: Latencies,
    strategies: Iterable[str] = tuple(HANDLED),
) -> list[Agreement]:
    """``strategies`` (of ``HANDLED``) of a ``nodes`` gang at ``rate``
    preemptions per VM-hour, seeds 1..``seeds``, through the handlers and
    the model."""
    unknown = set(strategies) - set(HANDLED)
    if unknown:
        known = ", ".join(HANDLED)
        raise ValueError(f"not run through the handlers: {', '.join(sorted(unknown))} ({known})")
    job = Job(f"{nodes}x {gpu}", machine_id, hours, nodes)
    params = params_of(lat)
    found: dict[str, list[tuple[float, ...]]] = {s: [] for s in HANDLED if s in strategies}
    for seed in range(1, seeds + 1):
        trace = traces.poisson(rate, nodes, lat.max_hours, seed)
        base = SpotlineRun(job, trace, params, on_demand=True, boots=boot_draws(lat, seed)).run()
        model_base = gang_model.on_demand(job, lat, seed)
        for strategy in found:
            how = HANDLED[strategy]
            run = SpotlineRun(
                job,
                trace,
                params,
                replace_one=how.replace_one,
                min_nodes=how.min_nodes(nodes),
                boots=boot_draws(lat, seed),
            )
            real = run.run()
            model = gang_model.run(strategy, job, trace, lat, seed)
            found[strategy].append(
                (
                    100 * (1 - real.cost_usd / base.cost_usd),
                    100 * (real.makespan_s / base.makespan_s - 1),
                    100 * (1 - model.cost_usd / model_base.cost_usd),
                    100 * (model.makespan_s / model_base.makespan_s - 1),
                    real.preemptions,
                    run.replacements,
                    real.finished,
                )
            )
    return [_agreement(gpu, nodes, rate, strategy, runs) for strategy, runs in found.items()]


def _agreement(
    gpu: str, nodes: int, rate: float, strategy: str, runs: list[tuple[float, ...]]
) -> Agreement:
    means = [statistics.fmean(r[i] for r in runs) for i in range(6)]
    return Agreement(
        gpu,
        nodes,
        rate,
        strategy,
        savings=means[0],
        makespan=means[1],
        model_savings=means[2],
        model_makespan=means[3],
        preemptions=means[4],
        replacements=means[5],
        finished=sum(bool(r[6]) for r in runs),
        runs=len(runs),
    )


def markdown(rows: list[Agreement]) -> str:
    lines = [
        "| GPU | nodes | preemptions/VM-h | strategy | cheaper: handlers | cheaper: model "
        "| makespan: handlers | makespan: model | preemptions | replacement VMs | finished |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.gpu} | {r.nodes} | {r.rate:g} | {r.strategy} | {r.savings:.1f} % "
            f"| {r.model_savings:.1f} % | {r.makespan:+.1f} % | {r.model_makespan:+.1f} % "
            f"| {r.preemptions:.1f} | {r.replacements:.1f} | {r.finished}/{r.runs} |"
        )
    return "\n".join(lines)
