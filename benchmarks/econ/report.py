"""Runs of every strategy over seeded traces, summed up as docs/benchmarks.md's table."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchmarks.econ import baselines
from benchmarks.econ.breakdown import Breakdown
from benchmarks.econ.model import SOURCES, Job, Outcome, Params
from benchmarks.econ.spotline_run import SpotlineRun
from benchmarks.econ.traces import Trace

STRATEGIES = ("spotline", "all on-demand", "scratch on Spot", "SkyPilot-like poller")
# Issue 14's target at one preemption per VM-hour.
TARGET_SAVINGS_PERCENT = 60.0
TARGET_MAKESPAN_PERCENT = 10.0


def run_strategy(strategy: str, job: Job, trace: Trace, params: Params) -> Outcome:
    """One run: spotline and on-demand through spotline's code, the others modelled."""
    if strategy == "spotline":
        return SpotlineRun(job, trace, params).run()
    if strategy == "all on-demand":
        return SpotlineRun(job, trace, params, on_demand=True).run()
    if strategy == "scratch on Spot":
        return baselines.run(baselines.SCRATCH, job, trace, params)
    if strategy == "SkyPilot-like poller":
        return baselines.run(baselines.SKYPILOT_LIKE, job, trace, params)
    raise ValueError(f"unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)})")


@dataclass(frozen=True)
class Row:
    """One (job, trace set, strategy): its runs, one per trace."""

    job: Job
    label: str
    strategy: str
    runs: tuple[Outcome, ...]
    on_demand: Outcome

    def mean(self, value: Callable[[Outcome], float]) -> float:
        return statistics.fmean(value(r) for r in self.runs)

    def spread(self, value: Callable[[Outcome], float]) -> float:
        return statistics.pstdev(value(r) for r in self.runs) if len(self.runs) > 1 else 0.0

    @property
    def cost(self) -> float:
        return self.mean(lambda r: r.cost_usd)

    @property
    def makespan_h(self) -> float:
        return self.mean(lambda r: r.makespan_s) / 3600

    @property
    def savings_percent(self) -> float:
        return 100 * (1 - self.cost / self.on_demand.cost_usd)

    @property
    def makespan_over_percent(self) -> float:
        return 100 * (self.mean(lambda r: r.makespan_s) / self.on_demand.makespan_s - 1)

    def cells(self) -> list[str]:
        finished = sum(r.finished for r in self.runs)
        return [
            self.job.name,
            self.label,
            self.strategy,
            f"{self.cost:.2f} ± {self.spread(lambda r: r.cost_usd):.2f}",
            f"{self.makespan_h:.2f} ± {self.spread(lambda r: r.makespan_s) / 3600:.2f}",
            f"{self.mean(lambda r: r.lost_gpu_hours(self.job)):.2f}",
            f"{self.mean(lambda r: r.preemptions):.1f}",
            f"{self.savings_percent:.1f}",
            f"{finished}/{len(self.runs)}",
        ]


HEADER = [
    "job",
    "preemptions/VM-h",
    "strategy",
    "cost $ (mean ± sd)",
    "makespan h",
    "lost GPU-h",
    "preemptions",
    "savings vs on-demand %",
    "finished",
]


def rows(
    job: Job, label: str, traces: Sequence[Trace], params: Params, on_demand: Outcome
) -> list[Row]:
    found = []
    for strategy in STRATEGIES:
        if strategy == "all on-demand":
            runs: tuple[Outcome, ...] = (on_demand,)
        else:
            runs = tuple(run_strategy(strategy, job, trace, params) for trace in traces)
        found.append(Row(job, label, strategy, runs, on_demand))
    return found


def markdown(table: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in table]
    return "\n".join(lines)


def verdict(row: Row) -> str:
    """Issue 14's target for a spotline row: >= 60 % cheaper, makespan within 10 %."""
    cheap = row.savings_percent >= TARGET_SAVINGS_PERCENT
    fast = row.makespan_over_percent <= TARGET_MAKESPAN_PERCENT
    spot, od = row.job.machine.spot_usd_per_hour, row.job.machine.on_demand_usd_per_hour
    return (
        f"{row.job.name} at {row.label}/VM-h: {row.savings_percent:.1f} % cheaper than on-demand "
        f"({'met' if cheap else 'NOT met'}: >= {TARGET_SAVINGS_PERCENT:.0f} %; the catalog's Spot "
        f"price alone is {100 * (1 - spot / od):.1f} % off), makespan "
        f"{row.makespan_over_percent:+.1f} % ({'met' if fast else 'NOT met'}: "
        f"<= {TARGET_MAKESPAN_PERCENT:.0f} %)"
    )


BREAKDOWN_HEADER = [
    "job",
    "preemptions/VM-h",
    "stops",
    "makespan past on-demand h",
    "detection h",
    "teardown h",
    "placement wait h",
    "boots h",
    "lost work h",
    "other h",
]


def breakdown_markdown(table: Sequence[Row]) -> str:
    """Where spotline's makespan past on-demand went (means over the traces):
    hearing of each stop, waiting for the lost VMs' deletes, waiting to place
    the replacement (quota, capacity, the reaper's tick), its boot, the work
    redone; "other" is what those do not explain."""
    lines = ["| " + " | ".join(BREAKDOWN_HEADER) + " |", "|" + "---|" * len(BREAKDOWN_HEADER)]
    for row in table:
        if row.strategy != "spotline":
            continue
        parts = Breakdown.mean([r.breakdown for r in row.runs if r.breakdown is not None])
        past_s = row.mean(lambda r: r.makespan_s) - row.on_demand.makespan_s
        causes = (parts.detection_s, parts.teardown_s, parts.placement_s, parts.boot_s)
        cells = [row.job.name, row.label, f"{parts.stops:.1f}"]
        cells.append(f"{past_s / 3600:.2f} ({row.makespan_over_percent:+.1f} %)")
        cells += [f"{s / 3600:.2f}" for s in (*causes, parts.lost_work_s)]
        cells.append(f"{(past_s - parts.total_s) / 3600:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parameters(params: Params) -> str:
    """Every modelled figure, its value and where it comes from."""
    return "\n".join(
        f"- {name} = {getattr(params, name):g}: {source}" for name, source in SOURCES.items()
    )
