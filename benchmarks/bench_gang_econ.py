"""Multi-node Spot economics: how a gang is recovered, with Google's latencies.

Full relaunch, relaunch waiting for the old nodes' deletes (spotline
before), replace-one (spotline's, for gangs of every framework),
elastic (spotline's min_nodes, for pytorch and command gangs),
and a SkyPilot-like poller
with 60 s, 10 min and 30 min periodic checkpoints, on the same seeded Poisson
traces and boot draws, for 2-, 4- and 8-node gangs of T4 and L4 VMs at 0.5, 1
and 2 preemptions per VM-hour (``benchmarks.econ.gang_model``). Prints cost
against on demand and makespan, then the goals for a 4-node gang at 1
preemption per VM-hour.

Then relaunch, replace-one and elastic of the ``--handlers`` cells through
spotline's real handlers, beside the model's figures for the same traces and
boot draws (``benchmarks.econ.gang_handlers``), with the goals by the
handlers' figures and the wall time they took.

    python benchmarks/bench_gang_econ.py                 # BENCHMARKS.md's tables
    python benchmarks/bench_gang_econ.py --nodes 4 --rates 1 --seeds 50 --handlers ""
    python benchmarks/bench_gang_econ.py --handlers L4:2:1,L4:8:1,T4:4:1 --handler-seeds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.econ import (
    gang_handlers,
    gang_model,
    gang_overhead,
    sensitivity,
    traces,
    what_it_takes,
)
from benchmarks.econ.gang_model import Latencies
from benchmarks.econ.gang_overhead import Overhead
from benchmarks.econ.model import Job

MACHINES = {"T4": "n1-standard-8-t4", "L4": "g2-standard-4"}
# Goals for a 4-node gang at 1 preemption per VM-hour.
GOAL_T4_SAVINGS = 60.0
GOAL_L4_POINTS = 2.0  # within this many points of the Spot discount
GOAL_MAKESPAN = {gang_model.REPLACE_ONE: 10.0, gang_model.ELASTIC: 5.0}


@dataclass(frozen=True)
class Cell:
    gpu: str
    nodes: int
    rate: float
    strategy: str
    savings: float  # percent cheaper than on demand, mean over seeds
    makespan: float  # percent longer than on demand, mean over seeds
    spread: float  # the savings' standard deviation over seeds
    finished: int
    runs: int


def measure(
    gpu: str, nodes: int, rate: float, hours: float, seeds: int, lat: Latencies
) -> list[Cell]:
    job = Job(f"{nodes}x {gpu}", MACHINES[gpu], hours, nodes)
    found: dict[str, list[tuple[float, float, bool]]] = {s: [] for s in gang_model.STRATEGIES}
    for seed in range(1, seeds + 1):
        trace = traces.poisson(rate, nodes, lat.max_hours, seed)
        base = gang_model.on_demand(job, lat, seed)
        for strategy in gang_model.STRATEGIES:
            run = gang_model.run(strategy, job, trace, lat, seed)
            savings = 100 * (1 - run.cost_usd / base.cost_usd)
            longer = 100 * (run.makespan_s / base.makespan_s - 1)
            found[strategy].append((savings, longer, run.finished))
    cells = []
    for strategy, runs in found.items():
        cheaper = [r[0] for r in runs]
        cells.append(
            Cell(
                gpu,
                nodes,
                rate,
                strategy,
                statistics.fmean(cheaper),
                statistics.fmean(r[1] for r in runs),
                statistics.pstdev(cheaper) if len(cheaper) > 1 else 0.0,
                sum(r[2] for r in runs),
                len(runs),
            )
        )
    return cells


def explain(
    gpu: str, nodes: int, rate: float, hours: float, seeds: int, lat: Latencies
) -> list[tuple[str, Overhead, float]]:
    """Each strategy's mean overhead by cause over the seeds' finished runs,
    with the mean on-demand makespan, for ``gang_overhead.markdown``."""
    job = Job(f"{nodes}x {gpu}", MACHINES[gpu], hours, nodes)
    spent: dict[str, list[Overhead]] = {s: [] for s in gang_model.STRATEGIES}
    bases = []
    for seed in range(1, seeds + 1):
        trace = traces.poisson(rate, nodes, lat.max_hours, seed)
        bases.append(gang_model.on_demand(job, lat, seed).makespan_s)
        for strategy in gang_model.STRATEGIES:
            run, overhead = gang_model.explained(strategy, job, trace, lat, seed)
            if run.finished:
                spent[strategy].append(overhead)
    base = statistics.fmean(bases)
    label = f"{gpu} {nodes} nodes @{rate:g}/h"
    return [(f"{label}, {s}", Overhead.mean(runs), base) for s, runs in spent.items() if runs]


def spot_discount(gpu: str) -> float:
    machine = Job("price", MACHINES[gpu], 1.0).machine
    return 100 * (1 - machine.spot_usd_per_hour / machine.on_demand_usd_per_hour)


def markdown(cells: list[Cell]) -> str:
    lines = [
        "| GPU | nodes | preemptions/VM-h | strategy | cheaper than on demand "
        "| makespan vs on demand |",
        "|---|---|---|---|---|---|",
    ]
    for c in cells:
        cut = "" if c.finished == c.runs else f" ({c.runs - c.finished} of {c.runs} cut off)"
        lines.append(
            f"| {c.gpu} | {c.nodes} | {c.rate:g} | {c.strategy} | "
            f"{c.savings:.1f} % (sd {c.spread:.1f}) | {c.makespan:+.1f} %{cut} |"
        )
    return "\n".join(lines)


def goals(cells: list[Cell]) -> list[str]:
    """The goals for a 4-node gang at 1 preemption/VM-hour, met or not, per strategy."""
    return [
        verdict(c.gpu, c.strategy, c.savings, c.makespan)
        for c in cells
        if c.nodes == 4 and c.rate == 1.0
    ]


def verdict(gpu: str, strategy: str, savings: float, makespan: float) -> str:
    """The goals for one strategy of a 4-node gang at 1 preemption/VM-hour:
    T4 at least 60 % cheaper (L4 within 2 points of its Spot discount), and
    the makespan bound of replace-one and elastic."""
    if gpu == "T4":
        cost_goal, met = f">= {GOAL_T4_SAVINGS:g} %", savings >= GOAL_T4_SAVINGS
    else:
        floor = spot_discount("L4") - GOAL_L4_POINTS
        cost_goal, met = f">= {floor:.1f} % (Spot discount - 2 points)", savings >= floor
    line = f"{gpu} {strategy}: {savings:.1f} % cheaper ({_met(met)}: {cost_goal})"
    bound = GOAL_MAKESPAN.get(strategy)
    if bound is not None:
        return line + f", makespan {makespan:+.1f} % ({_met(makespan <= bound)}: <= +{bound:g} %)"
    return line + f", makespan {makespan:+.1f} %"


def _met(met: bool) -> str:
    return "met" if met else "NOT met"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="T4,L4", help=f"of {', '.join(MACHINES)}")
    parser.add_argument("--nodes", default="2,4,8", help="gang sizes")
    parser.add_argument("--rates", default="0.5,1,2", help="preemptions per VM-hour")
    parser.add_argument("--hours", type=float, default=24.0, help="the job's work, whole gang")
    parser.add_argument("--seeds", type=int, default=20, help="seeded traces per cell")
    parser.add_argument(
        "--handlers",
        default="L4:4:1",
        help='cells run through the handlers too, GPU:NODES:RATE, comma-separated ("": none)',
    )
    parser.add_argument("--handler-seeds", type=int, default=2, help="seeded traces per cell")
    parser.add_argument(
        "--handler-strategies",
        default=",".join(gang_handlers.HANDLED),
        help="the strategies run through the handlers, comma-separated",
    )
    args = parser.parse_args(argv)
    strategies = [s for s in args.handler_strategies.split(",") if s]
    unknown_strategies = set(strategies) - set(gang_handlers.HANDLED)
    if unknown_strategies:
        parser.error(
            f"--handler-strategies: unknown {', '.join(sorted(unknown_strategies))} "
            f"(of {', '.join(gang_handlers.HANDLED)})"
        )
    unknown = set(args.gpus.split(",")) - set(MACHINES)
    if unknown:
        parser.error(f"--gpus: unknown {', '.join(sorted(unknown))} (one of {', '.join(MACHINES)})")
    try:
        handled = [handler_cell(text) for text in args.handlers.split(",") if text]
    except ValueError as err:
        parser.error(f"--handlers: {err}")
    lat = Latencies()
    cells: list[Cell] = []
    for gpu in args.gpus.split(","):
        for nodes in map(int, args.nodes.split(",")):
            for rate in map(float, args.rates.split(",")):
                cells += measure(gpu, nodes, rate, args.hours, args.seeds, lat)
    print(markdown(cells))
    print("\nSpot discount of the catalog's prices: ", end="")
    print(", ".join(f"{gpu} {spot_discount(gpu):.1f} %" for gpu in args.gpus.split(",")))
    print("\ngoals, 4-node gang at 1 preemption/VM-hour:")
    for line in goals(cells):
        print(f"  {line}")
    if 1.0 in map(float, args.rates.split(",")):
        print_explained(args.gpus.split(",")[0], args.nodes, args.hours, args.seeds, lat)
        if "4" in args.nodes.split(","):
            print_in_place_regroup(args.gpus.split(","), args.hours, args.seeds, lat)
            machines = {gpu: MACHINES[gpu] for gpu in args.gpus.split(",")}
            what_it_takes.print_section(machines, goals_of(machines), args.hours, args.seeds, lat)
    print("\nlatencies (seconds) and where each comes from:")
    for name, source in gang_model.SOURCES.items():
        print(f"  {name} = {getattr(lat, name):g}: {source}")
    if handled:
        print_handled(handled, args.hours, args.handler_seeds, lat, strategies)
    return 0


def goals_of(machines: dict[str, str]) -> list[sensitivity.Goal]:
    """The goals for a 4-node gang at 1 preemption/VM-hour, as bounds to bisect on."""
    found = [sensitivity.Goal(strategy, bound) for strategy, bound in GOAL_MAKESPAN.items()]
    for gpu in machines:
        floor = GOAL_T4_SAVINGS if gpu == "T4" else spot_discount(gpu) - GOAL_L4_POINTS
        found += [sensitivity.Goal(strategy, floor, gpu) for strategy in GOAL_MAKESPAN]
    return found


def print_explained(gpu: str, nodes: str, hours: float, seeds: int, lat: Latencies) -> None:
    """Where each strategy's makespan beyond on demand goes, at 1
    preemption/VM-hour (the same on any GPU: only the prices differ)."""
    sizes = map(int, nodes.split(","))
    rows = [row for n in sizes for row in explain(gpu, n, 1.0, hours, seeds, lat)]
    print("\nwhere the makespan beyond on demand goes, at 1 preemption/VM-hour (any GPU:")
    print("percent of the on-demand makespan, mean of the finished runs):\n")
    print(gang_overhead.markdown(rows))


def print_in_place_regroup(gpus: list[str], hours: float, seeds: int, lat: Latencies) -> None:
    """A product change, modelled: a gang's ranks regroup without a restart
    (the process group re-formed in the running processes, the state kept in
    memory; the replacement restores during its boot), so a regroup costs no
    ``restart_s`` after the last node is up."""
    changed = replace(lat, restart_s=0.0)
    print(
        "\nmodelled, not built: ranks that regroup without a restart "
        "(restart_s 0), 4-node gang at 1 preemption/VM-hour:"
    )
    for gpu in gpus:
        for cell in measure(gpu, 4, 1.0, hours, seeds, changed):
            if cell.strategy in GOAL_MAKESPAN:
                print(f"  {verdict(gpu, cell.strategy, cell.savings, cell.makespan)}")


def handler_cell(text: str) -> tuple[str, int, float]:
    """GPU:NODES:RATE, e.g. L4:4:1. Raises ValueError naming what is wrong."""
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in MACHINES:
        raise ValueError(f"{text!r} is not GPU:NODES:RATE with GPU one of {', '.join(MACHINES)}")
    try:
        nodes, rate = int(parts[1]), float(parts[2])
    except ValueError:
        raise ValueError(f"{text!r}: NODES is a whole number, RATE a number") from None
    if nodes < 2 or rate < 0:
        raise ValueError(f"{text!r}: a gang has NODES >= 2, and RATE >= 0")
    return parts[0], nodes, rate


def print_handled(
    cells: list[tuple[str, int, float]],
    hours: float,
    seeds: int,
    lat: Latencies,
    strategies: list[str],
) -> None:
    """``strategies`` through the handlers, beside the model."""
    began = time.monotonic()
    rows: list[gang_handlers.Agreement] = []
    for gpu, nodes, rate in cells:
        rows += gang_handlers.compare(
            gpu, MACHINES[gpu], nodes, rate, hours, seeds, lat, strategies
        )
    same = f"same traces and boot draws, {seeds} seeds"
    print(f"\nthrough spotline's handlers, beside the model ({same}):\n")
    print(gang_handlers.markdown(rows))
    print("\ngoals by the handlers' figures:")
    for r in rows:
        if r.nodes == 4 and r.rate == 1.0:
            print(f"  {verdict(r.gpu, r.strategy, r.savings, r.makespan)}")
    print(f"\n{len(rows)} rows through the handlers in {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
