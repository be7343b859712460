"""The benchmark's section "what it would take to meet the makespan goals",
for a 4-node gang at 1 preemption per VM-hour: the inputs scaled, each
input's break-even (``sensitivity``), and two policies tried
(``gang_variants``), all in the model on the same traces and boot draws."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from benchmarks.econ import gang_model, gang_overhead, gang_variants, sensitivity, traces
from benchmarks.econ.gang_model import Latencies
from benchmarks.econ.gang_overhead import Overhead
from benchmarks.econ.model import Job, Outcome
from benchmarks.econ.sensitivity import Cell, Goal
from benchmarks.econ.traces import Trace

NODES = 4
RATE = 1.0

# One run of a policy: (job, trace, latencies, seed) -> the run and its overhead by cause.
Policy = Callable[[Job, Trace, Latencies, int], tuple[Outcome, Overhead]]


def policies(rate: float) -> dict[str, Policy]:
    """The default strategies and the two variants, by the names the tables print."""

    def default(strategy: str) -> Policy:
        return lambda job, trace, lat, seed: gang_model.explained(strategy, job, trace, lat, seed)

    def growing(job: Job, trace: Trace, lat: Latencies, seed: int) -> tuple[Outcome, Overhead]:
        return gang_variants.growing_when_it_pays(job, trace, lat, seed, rate)

    return {
        gang_model.REPLACE_ONE: default(gang_model.REPLACE_ONE),
        gang_variants.WARM_SPARE: gang_variants.warm_spare,
        gang_model.ELASTIC: default(gang_model.ELASTIC),
        gang_variants.GROW_WHEN_IT_PAYS: growing,
    }


def print_section(
    machines: dict[str, str], goals: Sequence[Goal], hours: float, seeds: int, lat: Latencies
) -> None:
    cell = Cell(NODES, RATE, hours, seeds, tuple(machines.items()))
    where = f"{NODES}-node gang at {RATE:g} preemption/VM-hour, {seeds} seeds"
    print(f"\nwhat it would take to meet the goals ({where}, in the model):")
    print("\neach input scaled, the others unchanged (makespan vs on demand; cheaper than it):\n")
    print(sensitivity.scaled_markdown(cell, [gang_model.REPLACE_ONE, gang_model.ELASTIC], lat))
    print("\nthe value of each input at which a goal is met, the others unchanged (bisection):\n")
    print(sensitivity.break_even_markdown(cell, goals, lat))
    print("\nthe inputs now, and where each comes from:")
    for knob in sensitivity.knobs(lat):
        for name in (*knob.fields, *knob.kept):
            kept = " (not scaled)" if name in knob.kept else ""
            print(f"  {name} = {getattr(lat, name):g}{kept}: {gang_model.SOURCES[name]}")
    print(f"\ntwo policies tried ({where}, the same traces; the spare's slot has its own):\n")
    print(variants_markdown(machines, hours, seeds, lat))
    for nodes, rate in ((NODES, RATE), (8, 2.0)):
        job = Job(f"{nodes} nodes", next(iter(machines.values())), hours, nodes)
        declined, asked = gang_variants.declined_grows(job, lat, rate, seeds)
        print(
            f"  {gang_variants.GROW_WHEN_IT_PAYS}, {nodes} nodes at {rate:g}/VM-h: "
            f"{declined} of {asked} grows declined"
        )


def variants_markdown(machines: dict[str, str], hours: float, seeds: int, lat: Latencies) -> str:
    """Each policy's savings per GPU, makespan, VMs billed and makespan by cause."""
    gpus = list(machines)
    heads = " | ".join(f"{g} cheaper" for g in gpus)
    lines = [f"| policy | {heads} | makespan | VM-h billed |", "|---|" + "---|" * (len(gpus) + 2)]
    rows: list[tuple[str, Overhead, float]] = []
    for name, policy in policies(RATE).items():
        cheaper: dict[str, list[float]] = {g: [] for g in gpus}
        longer, billed, spent, bases = [], [], [], []
        for seed in range(1, seeds + 1):
            # One more node than the gang: the spare's slot; the gang's nodes
            # get the same preemptions as in a trace of the gang alone.
            trace = traces.poisson(RATE, NODES + 1, lat.max_hours, seed)
            for gpu, machine_id in machines.items():
                job = Job(f"{NODES}x {gpu}", machine_id, hours, NODES)
                base = gang_model.on_demand(job, lat, seed)
                run, overhead = policy(job, trace, lat, seed)
                cheaper[gpu].append(100 * (1 - run.cost_usd / base.cost_usd))
            longer.append(100 * (run.makespan_s / base.makespan_s - 1))
            billed.append(run.vm_s / 3600)
            bases.append(base.makespan_s)
            if run.finished:
                spent.append(overhead)
        savings = " | ".join(f"{statistics.fmean(cheaper[g]):.1f} %" for g in gpus)
        lines.append(
            f"| {name} | {savings} | {statistics.fmean(longer):+.1f} % "
            f"| {statistics.fmean(billed):.1f} |"
        )
        rows.append((name, Overhead.mean(spent), statistics.fmean(bases)))
    return "\n".join(lines) + "\n\nwhere their makespan goes:\n\n" + gang_overhead.markdown(rows)
