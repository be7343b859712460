"""A job's timeline as a pie or a funnel of its phases: a matplotlib figure
(``Job.plot_timeline``), or a PNG drawn with the Agg backend, no display
needed (``spotline timeline --chart``).

matplotlib is the optional ``viz`` extra: ``pip install -e '.[viz]'``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from spotline.shared.domain.timeline import Phase, Timeline

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CHARTS = ("pie", "funnel")
# One colour per phase, the same in both charts.
_COLOURS = {
    Phase.REQUESTING: "#4e79a7",
    Phase.WAITING_FOR_CAPACITY: "#bab0ac",
    Phase.WAITING_FOR_QUOTA: "#9c755f",
    Phase.CONNECTING: "#76b7b2",
    Phase.GEARING_UP: "#edc948",
    Phase.SENDING: "#b07aa1",
    Phase.INSTALLING: "#d4a6c8",
    Phase.TRAINING: "#59a14f",
    Phase.RETURNING: "#f28e2b",
    Phase.PREEMPTED: "#e15759",
    Phase.WAITING_FOR_NODE: "#8cd17d",
    Phase.RECOVERING: "#ff9da7",
}


class ChartsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def figure(timeline: Timeline, chart: str, title: str) -> Figure:
    """The ``chart`` (pie or funnel) of the timeline's totals, as a matplotlib
    figure.

    Raises:
        ChartsUnavailable: matplotlib is not installed.
        ValueError: not a chart this draws.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ChartsUnavailable(
            "charts need matplotlib: pip install 'spotline[viz]' (or pip install matplotlib)"
        ) from err
    if chart not in CHARTS:
        raise ValueError(f"chart {chart!r}: expected one of {', '.join(CHARTS)}")
    totals = {phase: s for phase, s in timeline.totals().items() if s > 0}
    # A Figure of its own, not pyplot's: no global state to close or share
    # between threads, no window; a notebook shows it as a cell's value, and
    # savefig draws a PNG with Agg.
    drawn = Figure(figsize=(8, 5), dpi=100)
    axes = drawn.subplots()
    if not totals:
        axes.text(0.5, 0.5, "no time recorded yet", ha="center", va="center")
        axes.set_axis_off()
    elif chart == "pie":
        _pie(axes, totals)
    else:
        _funnel(axes, totals)
    axes.set_title(title)
    drawn.tight_layout()
    return drawn


def draw(timeline: Timeline, chart: str, title: str, path: Path) -> Path:
    """Draw ``chart`` (pie or funnel) of the timeline's totals into ``path`` (a PNG)."""
    drawn = figure(timeline, chart, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    drawn.savefig(path, format="png")
    return path


def _pie(axes: Axes, totals: dict[Phase, float]) -> None:
    """Shares of the job's time; small slices are named in the legend only."""
    phases = list(totals)
    whole = sum(totals.values())
    wedges, _ = axes.pie(
        [totals[p] for p in phases],
        colors=[_COLOURS[p] for p in phases],
        startangle=90,
        counterclock=False,
    )
    labels = [f"{p.value}: {duration(totals[p])} ({totals[p] / whole:.0%})" for p in phases]
    axes.legend(wedges, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    axes.axis("equal")


def _funnel(axes: Axes, totals: dict[Phase, float]) -> None:
    """The phases top to bottom in the order a job meets them, each bar as wide
    as its time and centred, as a funnel."""
    phases = list(totals)
    widths = [totals[p] for p in phases]
    widest = max(widths)
    rows = list(range(len(phases)))[::-1]
    axes.barh(
        rows,
        widths,
        left=[(widest - w) / 2 for w in widths],
        color=[_COLOURS[p] for p in phases],
    )
    for row, phase, width in zip(rows, phases, widths, strict=True):
        label = f"{phase.value}: {duration(width)}"
        axes.text(widest / 2, row, label, ha="center", va="center")
    axes.set_yticks([])
    axes.set_xlabel("seconds")


def duration(seconds: float) -> str:
    """``0.4 s``, ``12 s``, ``3 min 05 s``, ``2 h 07 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
