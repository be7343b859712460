"""Multi-node Spot economics: how a gang is recovered, with Google's latencies.

Full relaunch (spotline today), relaunch waiting for the old nodes' deletes
(spotline before), replace-one and elastic (MODELS of strategies spotline
does not have yet), and a SkyPilot-like poller with 60 s, 10 min and 30 min
periodic checkpoints, on the same seeded Poisson traces and boot draws, for
2-, 4- and 8-node gangs of T4 and L4 VMs at 0.5, 1 and 2 preemptions per
VM-hour (``benchmarks.econ.gang_model``). Prints cost against on demand and
makespan, then the goals for a 4-node gang at 1 preemption per VM-hour.

    python benchmarks/bench_gang_econ.py                 # BENCHMARKS.md's table
    python benchmarks/bench_gang_econ.py --nodes 4 --rates 1 --seeds 50
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.econ import gang_model, traces
from benchmarks.econ.gang_model import Latencies
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
    verdicts = []
    for c in cells:
        if c.nodes != 4 or c.rate != 1.0:
            continue
        if c.gpu == "T4":
            cost_goal, met = f">= {GOAL_T4_SAVINGS:g} %", c.savings >= GOAL_T4_SAVINGS
        else:
            floor = spot_discount("L4") - GOAL_L4_POINTS
            cost_goal, met = f">= {floor:.1f} % (Spot discount - 2 points)", c.savings >= floor
        line = f"{c.gpu} {c.strategy}: {c.savings:.1f} % cheaper ({_met(met)}: {cost_goal})"
        bound = GOAL_MAKESPAN.get(c.strategy)
        if bound is not None:
            line += f", makespan {c.makespan:+.1f} % ({_met(c.makespan <= bound)}: <= +{bound:g} %)"
        else:
            line += f", makespan {c.makespan:+.1f} %"
        verdicts.append(line)
    return verdicts


def _met(met: bool) -> str:
    return "met" if met else "NOT met"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="T4,L4", help=f"of {', '.join(MACHINES)}")
    parser.add_argument("--nodes", default="2,4,8", help="gang sizes")
    parser.add_argument("--rates", default="0.5,1,2", help="preemptions per VM-hour")
    parser.add_argument("--hours", type=float, default=24.0, help="the job's work, whole gang")
    parser.add_argument("--seeds", type=int, default=20, help="seeded traces per cell")
    args = parser.parse_args(argv)
    unknown = set(args.gpus.split(",")) - set(MACHINES)
    if unknown:
        parser.error(f"--gpus: unknown {', '.join(sorted(unknown))} (one of {', '.join(MACHINES)})")
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
    print("\nlatencies (seconds) and where each comes from:")
    for name, source in gang_model.SOURCES.items():
        print(f"  {name} = {getattr(lat, name):g}: {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
