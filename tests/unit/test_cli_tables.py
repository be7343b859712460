"""The one way the CLI lays out a table (rich): columns two spaces apart,
numbers to the right, a cell shown as it reads, never wrapped to a pipe's
width, no trailing blanks."""

from __future__ import annotations

import io

from rich.console import Console

from spotline.infra.cli.tables import render, table, text_table


def test_a_table_is_its_cells_two_spaces_apart_with_numbers_to_the_right() -> None:
    shown = text_table(
        ["JOB", "COST_USD", "NOTE"],
        [["j1", "0.5000", None], ["job-22", "12.25", "x"]],
        right={"COST_USD"},
    )

    assert shown.splitlines() == [
        "JOB     COST_USD  NOTE",
        "j1        0.5000",
        "job-22     12.25  x",
    ]


def test_a_cell_is_shown_as_it_reads_not_as_markup() -> None:
    hostile = "[bold red]boom[/] [link=http://x]y[/link] \x1b[31m"

    shown = text_table(["DESCRIPTION"], [[hostile]])

    assert hostile.replace("\x1b", "") in shown.replace("\x1b", "")
    assert "\x1b[1m" not in shown  # no style reached a plain rendering


def test_a_wide_table_to_a_pipe_is_neither_wrapped_nor_cut() -> None:
    long = "a description far wider than any terminal " * 6
    piped = Console(file=io.StringIO(), width=80, color_system=None)

    lines = render(table(["SETTING", "DESCRIPTION"], [["zones", long.strip()]]), piped).splitlines()

    assert len(lines) == 2 and lines[1].endswith(long.strip())
    assert all(line == line.rstrip() for line in lines)


def test_a_terminal_gets_bold_headers_and_a_pipe_plain_text() -> None:
    terminal = Console(file=io.StringIO(), force_terminal=True, color_system="standard")
    pipe = Console(file=io.StringIO(), color_system=None)
    headers, rows = ["JOB", "STATUS"], [["j1", "TRAINING"]]

    assert "\x1b[1m" in render(table(headers, rows), terminal)
    assert "\x1b" not in render(table(headers, rows), pipe)
