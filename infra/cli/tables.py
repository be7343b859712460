"""Every table the CLI prints, through rich: bold headers and colors on a
terminal, plain text to a pipe (and with ``NO_COLOR``); two spaces between
columns, never wrapped (a wrapped table cannot be read or grepped), no
trailing blanks."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

GAP = 2  # spaces between two columns
# Wider than any table: a table is as wide as its cells, whatever the terminal.
_UNBOUNDED = 100_000


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], right: Collection[str] = ()
) -> Table:
    """A table of ``rows`` under ``headers``; the columns named in ``right``
    align right (numbers). ``None`` is an empty cell; every cell is shown as
    it reads (no rich markup in a job's strings)."""
    shown = Table(box=None, pad_edge=False, padding=(0, GAP // 2), header_style="bold")
    for header in headers:
        shown.add_column(header, justify="right" if header in right else "left", no_wrap=True)
    for row in rows:
        shown.add_row(*(cell if isinstance(cell, Text) else Text(_cell(cell)) for cell in row))
    return shown


def _cell(value: object) -> str:
    return "" if value is None else str(value)


def render(shown: Table, console: Console | None = None, width: int | None = None) -> str:
    """``shown`` as text for ``console`` (colors only where it has them; none
    given: plain text), at most ``width`` columns (default: as wide as it needs)."""
    console = console or Console(color_system=None, highlight=False)
    console.width = width or _UNBOUNDED
    with console.capture() as captured:
        console.print(shown, soft_wrap=False)
    # rich pads the last cell of a row to its column's width: none of it in
    # what a person copies or a script greps.
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


def text_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], right: Collection[str] = ()
) -> str:
    """:func:`table` as plain text (a part of a longer text)."""
    return render(table(headers, rows, right))


def show(shown: Table) -> None:
    """``shown`` on stdout, as the CLI's console shows it."""
    from spotline.infra.cli.output import console

    print(render(shown, console()), flush=True)
