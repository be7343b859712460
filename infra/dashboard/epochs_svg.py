"""A job's metrics per epoch as an SVG image, drawn here rather than with
matplotlib: a few lines and text in the browser's own vector format, no
optional dependency, and cheap enough to redraw at every epoch.

One small panel per metric, each on its own scale (a loss near 2 and an
accuracy near 1 on one axis would flatten one of them). Metric names are the
trainer's strings: everything written into the SVG is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from spotline.shared.domain.documents import EpochDoc, epoch_order

WIDTH, PANEL_HEIGHT, PAD = 640, 140, 36
MAX_METRICS = 4  # more panels would make a long strip nobody reads
_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759")


def latest_per_epoch(epochs: Sequence[EpochDoc]) -> list[EpochDoc]:
    """One record per epoch number: a later attempt that resumed inside an
    epoch reports it again, and its record is what the model became."""
    found: dict[int, EpochDoc] = {}
    for record in sorted(epochs, key=epoch_order):
        found[record.epoch] = record
    return [found[n] for n in sorted(found)]


def epochs_svg(epochs: Sequence[EpochDoc]) -> str:
    """The chart as a standalone SVG document (width and height set, so an
    ``<img>`` knows its size)."""
    records = latest_per_epoch(epochs)
    names: list[str] = []
    for record in records:
        names += [n for n in record.metrics if n not in names]
    names = names[:MAX_METRICS]
    if not records or not names:
        return _document(60, ['<text x="20" y="35">no epochs yet</text>'])
    last = max(r.epochs for r in records) or records[-1].epoch
    parts = []
    for row, name in enumerate(names):
        points = [(r.epoch, r.metrics.get(name)) for r in records]
        found = [(x, y) for x, y in points if y is not None]
        parts.append(_panel(row, name, found, max(last, 1), _COLOURS[row % len(_COLOURS)]))
    return _document(PANEL_HEIGHT * len(names), parts)


def _panel(row: int, name: str, points: list[tuple[int, float]], last: int, colour: str) -> str:
    top = row * PANEL_HEIGHT
    left, right = PAD + 24, WIDTH - PAD
    high_y, low_y = top + 24, top + PANEL_HEIGHT - 24
    values = [y for _, y in points]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    span = (high - low) or 1.0

    def x_of(epoch: int) -> float:
        return left + (right - left) * (epoch / last)

    def y_of(value: float) -> float:
        return low_y - (low_y - high_y) * ((value - low) / span)

    line = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y in points)
    dots = "".join(
        f'<circle cx="{x_of(x):.1f}" cy="{y_of(y):.1f}" r="3" fill="{colour}">'
        f"<title>epoch {x}: {escape(name)} = {y:.4g}</title></circle>"
        for x, y in points
    )
    label = escape(name)
    return (
        f'<g data-metric="{label}">'
        f'<text x="{left}" y="{top + 16}" font-weight="bold">{label}</text>'
        f'<text x="{left - 6}" y="{high_y + 4}" text-anchor="end">{high:.4g}</text>'
        f'<text x="{left - 6}" y="{low_y + 4}" text-anchor="end">{low:.4g}</text>'
        f'<line x1="{left}" y1="{low_y}" x2="{right}" y2="{low_y}" stroke="#ccc"/>'
        f'<text x="{right}" y="{low_y + 16}" text-anchor="end">epoch {last}</text>'
        f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>'
        f"{dots}</g>"
    )


def _document(height: int, parts: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">'
        f'<rect width="100%" height="100%" fill="white"/>{"".join(parts)}</svg>'
    )
