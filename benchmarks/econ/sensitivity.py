"""What the goals ask of the model's inputs: replace-one's and elastic's cost
and makespan as one input is scaled (the others unchanged), and the value of
each input at which a goal would be met, found by bisection over the model
on the same traces and seeded boot draws (``gang_model``).

Runs with the same seeds are a deterministic function of the scale, so the
bisection is well defined; it assumes the goal's measure moves one way as
the input grows (a longer boot or restart never makes a run shorter on
average), and finds one crossing within ``TOLERANCE`` of the scale.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache

from benchmarks.econ import gang_model, traces
from benchmarks.econ.gang_model import Latencies
from benchmarks.econ.model import Job
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.pricing import vm_cost

TOLERANCE = 0.005  # of the scale: the break-even is found to within half a percent
SCALES = (0.0, 0.25, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
class Knob:
    """One input of the model, scaled as a whole: ``fields`` of ``Latencies``
    multiplied by one factor, up to ``most``."""

    label: str
    fields: tuple[str, ...]
    most: float = 4.0
    kept: tuple[str, ...] = ()  # fields of the same input left as they are

    def scaled(self, lat: Latencies, factor: float) -> Latencies:
        return replace(lat, **{name: getattr(lat, name) * factor for name in self.fields})

    def seconds(self, lat: Latencies, factor: float) -> float:
        return factor * sum(getattr(lat, name) for name in self.fields)


def knobs(lat: Latencies) -> tuple[Knob, ...]:
    """The inputs that dominate the overhead (``gang_overhead``): the
    replacement's insert-to-ready time (the whole distribution: the insert
    and the boot's median, the same spread), the restart at each change of
    size, and the save (which must fit in the notice)."""
    return (
        Knob(
            "insert-to-ready (insert_s + boot_median_s)",
            ("insert_s", "boot_median_s"),
            kept=("boot_sigma",),
        ),
        Knob("restart per change of size (restart_s)", ("restart_s",)),
        Knob("save (checkpoint_s)", ("checkpoint_s",), most=lat.notice_s / lat.checkpoint_s),
    )


@dataclass(frozen=True)
class Measured:
    """One strategy's means over the seeds: percent longer than on demand,
    and percent cheaper per GPU (the runs are the same on any GPU: only the
    prices differ)."""

    makespan: float
    savings: dict[str, float]


@dataclass(frozen=True)
class Cell:
    """A gang of ``nodes`` at ``rate`` preemptions per VM-hour, ``hours`` of
    work, over seeds 1..``seeds``; ``machines`` maps a GPU's name to its machine."""

    nodes: int
    rate: float
    hours: float
    seeds: int
    machines: tuple[tuple[str, str], ...]

    def measure(self, strategy: str, lat: Latencies) -> Measured:
        return _measure(self, strategy, lat)


@cache
def _measure(cell: Cell, strategy: str, lat: Latencies) -> Measured:
    gpu, machine_id = cell.machines[0]
    job = Job(f"{cell.nodes}x {gpu}", machine_id, cell.hours, cell.nodes)
    longer: list[float] = []
    cheaper: dict[str, list[float]] = {name: [] for name, _ in cell.machines}
    for seed in range(1, cell.seeds + 1):
        trace = traces.poisson(cell.rate, cell.nodes, lat.max_hours, seed)
        base = gang_model.on_demand(job, lat, seed)
        run = gang_model.run(strategy, job, trace, lat, seed)
        longer.append(100 * (run.makespan_s / base.makespan_s - 1))
        for name, machine_id in cell.machines:
            machine = load_catalog()[machine_id]
            paid = vm_cost(machine.spot_usd_per_hour, run.vm_s)
            cheaper[name].append(
                100 * (1 - paid / vm_cost(machine.on_demand_usd_per_hour, base.vm_s))
            )
    savings = {name: statistics.fmean(values) for name, values in cheaper.items()}
    return Measured(statistics.fmean(longer), savings)


@dataclass(frozen=True)
class Goal:
    """A bound on one strategy's measure: its makespan (``gpu`` None, at most
    ``bound`` percent longer) or its savings on ``gpu`` (at least ``bound``)."""

    strategy: str
    bound: float
    gpu: str | None = None

    def value(self, measured: Measured) -> float:
        return measured.makespan if self.gpu is None else measured.savings[self.gpu]

    def met(self, measured: Measured) -> bool:
        if self.gpu is None:
            return measured.makespan <= self.bound
        return measured.savings[self.gpu] >= self.bound

    @property
    def label(self) -> str:
        if self.gpu is None:
            return f"{self.strategy}: makespan <= +{self.bound:g} %"
        return f"{self.strategy}: {self.gpu} >= {self.bound:.1f} % cheaper"


@dataclass(frozen=True)
class BreakEven:
    """Where a goal flips as an input is scaled. ``factor`` is the scale
    nearest the flip at which it is met; None when it does not flip between
    0 and the input's ``most``: met throughout (``met_now``) or met nowhere."""

    factor: float | None
    met_now: bool
    at_zero: float  # the goal's measure with the input at 0


def bisect(met: Callable[[float], bool], met_at: float, unmet_at: float, tolerance: float) -> float:
    """A point where ``met`` holds, within ``tolerance`` of one where it does
    not, between ``met_at`` (met) and ``unmet_at`` (not met), either order."""
    while abs(unmet_at - met_at) > tolerance:
        middle = (met_at + unmet_at) / 2
        if met(middle):
            met_at = middle
        else:
            unmet_at = middle
    return met_at


def break_even(
    met: Callable[[float], bool], most: float, tolerance: float = TOLERANCE
) -> float | None:
    """The scale at which ``met`` flips: below 1 when it is not met at 1
    (None when not even at 0), above 1 when it is (None when still at ``most``)."""
    if met(1.0):
        return None if met(most) else bisect(met, 1.0, most, tolerance)
    return bisect(met, 0.0, 1.0, tolerance) if met(0.0) else None


def goal_break_even(cell: Cell, goal: Goal, knob: Knob, lat: Latencies) -> BreakEven:
    def met(factor: float) -> bool:
        return goal.met(cell.measure(goal.strategy, knob.scaled(lat, factor)))

    at_zero = goal.value(cell.measure(goal.strategy, knob.scaled(lat, 0.0)))
    return BreakEven(break_even(met, knob.most), met(1.0), at_zero)


def scaled_markdown(
    cell: Cell, strategies: Sequence[str], lat: Latencies, scales: Sequence[float] = SCALES
) -> str:
    """Each strategy's makespan and savings per GPU as each input is scaled."""
    gpus = [name for name, _ in cell.machines]
    heads = [f"{s}: {m}" for s in strategies for m in ("makespan", *(f"{g} cheaper" for g in gpus))]
    lines = ["| input | value (scale) | " + " | ".join(heads) + " |"]
    lines.append("|---|---|" + "---|" * len(heads))
    for knob in knobs(lat):
        for factor in scales:
            cells = []
            for strategy in strategies:
                measured = cell.measure(strategy, knob.scaled(lat, factor))
                cells.append(f"{measured.makespan:+.1f} %")
                cells += [f"{measured.savings[g]:.1f} %" for g in gpus]
            value = f"{knob.seconds(lat, factor):.1f} s (x{factor:g})"
            lines.append(f"| {knob.label} | {value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def break_even_markdown(cell: Cell, goals: Sequence[Goal], lat: Latencies) -> str:
    """For each goal and input: the measure now, and the input's value at
    which the goal is met with the others unchanged."""
    lines = ["| goal | now | input | now | break-even |", "|---|---|---|---|---|"]
    for goal in goals:
        now = goal.value(cell.measure(goal.strategy, lat))
        for knob in knobs(lat):
            found = goal_break_even(cell, goal, knob, lat)
            lines.append(
                f"| {goal.label} | {now:.1f} % | {knob.label} | "
                f"{knob.seconds(lat, 1.0):.1f} s | {_describe(found, knob, lat)} |"
            )
    return "\n".join(lines)


def _describe(found: BreakEven, knob: Knob, lat: Latencies) -> str:
    """Every input is a time: the goal is met at the break-even value or less."""
    if found.factor is None and found.met_now:
        return f"met up to {knob.seconds(lat, knob.most):.1f} s (x{knob.most:g}) at least"
    if found.factor is None:
        return f"not met even at 0 s ({found.at_zero:.1f} % there)"
    seconds = knob.seconds(lat, found.factor)
    return f"<= {seconds:.1f} s (x{found.factor:.2f}; {found.at_zero:.1f} % at 0 s)"
