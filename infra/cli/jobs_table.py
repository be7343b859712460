"""The jobs table of ``spotline status``, fitted to the terminal.

A column is shown only when it fits: the columns are taken in order of how
much a person needs them, and one that would overflow the width is left out
(never wrapped: a wrapped table cannot be read or grepped). DESCRIPTION, last,
takes what room is left and is cut with an ellipsis. Colors only go to a
terminal; rich writes plain text to a pipe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from spotline.infra.cli.job_fields import age, duration, short_span
from spotline.infra.cli.tables import GAP as _GAP
from spotline.infra.cli.tables import render
from spotline.shared.domain.documents import JobDoc

_DESCRIPTION_MIN = 12  # narrower than this, DESCRIPTION is left out
_STATUS_STYLES = {
    "COMPLETED": "green",
    "FAILED": "bold red",
    "CANCELED": "dim",
    "RECOVERING": "yellow",
    "TRAINING": "cyan",
}


@dataclass(frozen=True)
class Column:
    header: str
    need: int  # 1: always shown; higher: left out first
    cell: Callable[[JobDoc, datetime], str]
    right: bool = False  # numbers align right


def _metrics(job: JobDoc, now: datetime) -> str:
    return " ".join(
        f"{name}={'nan' if value is None else format(value, '.4g')}"
        for name, value in sorted(job.metrics.items())
    )


# In display order; ``need`` decides which go when the width is short.
COLUMNS = (
    Column("JOB", 1, lambda j, now: j.job_id),
    Column("USER", 4, lambda j, now: j.user),
    Column("STATUS", 1, lambda j, now: str(j.status)),
    Column("SUBSTATUS", 5, lambda j, now: str(j.substatus)),
    Column("PROGRESS", 2, lambda j, now: j.progress, right=True),
    Column("SUBMITTED", 2, lambda j, now: age(j.created_at, now), right=True),
    Column("DURATION", 3, lambda j, now: short_span(duration(j, now)), right=True),
    Column("PREEMPTIONS", 3, lambda j, now: str(j.preemptions), right=True),
    Column("MACHINE", 6, lambda j, now: j.machine_id or "", right=False),
    Column("COST_USD", 5, lambda j, now: f"{j.cost_usd:.4f}", right=True),
    Column(
        "SPOT_SAVING",
        6,
        lambda j, now: "" if j.savings_percent is None else f"{j.savings_percent:.0f}%",
        right=True,
    ),
    Column("METRICS", 7, _metrics),
)
DESCRIPTION = Column("DESCRIPTION", 8, lambda j, now: j.description)


def fitted(jobs: Sequence[JobDoc], now: datetime, width: int) -> tuple[list[Column], int]:
    """The columns that fit in ``width``, in display order, and the room left
    for DESCRIPTION (0: none)."""
    widths = {
        c.header: max([len(c.header), *(len(c.cell(job, now)) for job in jobs)]) for c in COLUMNS
    }
    chosen: list[Column] = []
    used = -_GAP
    for column in sorted(COLUMNS, key=lambda c: c.need):  # stable: display order within a need
        # JOB and STATUS always: a table without them says nothing.
        if column.need == 1 or used + _GAP + widths[column.header] <= width:
            chosen.append(column)
            used += _GAP + widths[column.header]
    room = width - used - _GAP
    wanted = max([len(DESCRIPTION.header), *(len(job.description) for job in jobs)])
    description = min(room, wanted) if room >= min(_DESCRIPTION_MIN, wanted) else 0
    return [c for c in COLUMNS if c in chosen], description


def jobs_table(jobs: Sequence[JobDoc], now: datetime, width: int) -> Table:
    """A rich table of ``jobs`` (already in the order to show) no wider than ``width``."""
    columns, description = fitted(jobs, now, width)
    table = Table(box=None, pad_edge=False, padding=(0, _GAP // 2), header_style="bold")
    for column in columns:
        table.add_column(column.header, justify="right" if column.right else "left", no_wrap=True)
    if description:
        table.add_column(
            DESCRIPTION.header, no_wrap=True, overflow="ellipsis", max_width=description
        )
    for job in jobs:
        cells: list[Text] = []
        for column in columns:
            text = column.cell(job, now)
            style = _STATUS_STYLES.get(text, "") if column.header == "STATUS" else ""
            cells.append(Text(text, style=style))
        if description:
            cells.append(Text(job.description))  # Text: no rich markup in user strings
        table.add_row(*cells)
    return table


def print_jobs(console: Console, jobs: Sequence[JobDoc], now: datetime) -> None:
    print(render(jobs_table(jobs, now, console.width), console, console.width), flush=True)
