"""The dashboard's parts that read no store: its epochs chart, a later attempt's
epoch, the command's port (the pages: tests/emulators/test_dashboard.py)."""

from __future__ import annotations

import re

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.dashboard.epochs_svg import epochs_svg
from tests.emulators.test_dashboard import an_epoch


def test_the_epochs_chart_draws_each_metric_over_the_epochs() -> None:
    svg = epochs_svg([an_epoch(1, 0.9), an_epoch(2, 0.5), an_epoch(3, 0.1, accuracy=None)])
    loss = re.search(r'data-metric="loss"[^>]*>.*?<polyline points="([^"]+)"', svg, re.S)
    assert loss is not None
    points = [tuple(map(float, p.split(","))) for p in loss.group(1).split()]
    xs, ys = [x for x, _ in points], [y for _, y in points]
    assert len(points) == 3 and xs == sorted(xs)
    assert ys == sorted(ys)  # a falling loss goes down the panel: y grows downwards
    accuracy = re.search(r'data-metric="accuracy"[^>]*>.*?<polyline points="([^"]+)"', svg, re.S)
    assert accuracy is not None and len(accuracy.group(1).split()) == 2  # None is left out
    empty = epochs_svg([])
    assert "no epochs yet" in empty and 'width="' in empty


def test_a_later_attempts_epoch_replaces_the_earlier_record_of_it() -> None:
    again = an_epoch(2, 0.3).model_copy(update={"attempt": 2})
    svg = epochs_svg([an_epoch(1, 0.9), an_epoch(2, 0.5), again])
    loss = re.search(r'data-metric="loss"[^>]*>.*?<polyline points="([^"]+)"', svg, re.S)
    assert loss is not None and len(loss.group(1).split()) == 2
    assert "0.3" in svg and "0.5" not in svg.split('data-metric="loss"')[1].split("</g>")[0]


def test_the_command_checks_its_port() -> None:
    with pytest.raises(SystemExit) as exit_:
        cli(["dashboard", "--port", "70000"])
    assert exit_.value.code == 2
