"""The economics benchmark's sensitivity (``benchmarks/econ/sensitivity``):
the bisection finds a known break-even on toy measures, in either
direction, says when a goal does not flip, and over the model finds the
scale at which a goal flips."""

from __future__ import annotations

import random

import pytest

from benchmarks import bench_gang_econ
from benchmarks.econ import gang_model, sensitivity
from benchmarks.econ.gang_model import Latencies
from benchmarks.econ.sensitivity import Cell, Goal

TOY_TOLERANCE = 1e-4


def test_the_bisection_finds_a_known_break_even_from_either_end() -> None:
    # A toy makespan, 6 % + 12 % x scale, against a goal of at most 10 %: met up to 1/3.
    def met(scale: float) -> bool:
        return 6.0 + 12.0 * scale <= 10.0

    found = sensitivity.bisect(met, 0.0, 1.0, TOY_TOLERANCE)
    assert met(found) and found == pytest.approx(1 / 3, abs=TOY_TOLERANCE)
    # A toy saving that rises with the scale: met from 0.7 up.
    rising = sensitivity.bisect(lambda scale: scale >= 0.7, 1.0, 0.0, TOY_TOLERANCE)
    assert rising >= 0.7 and rising == pytest.approx(0.7, abs=TOY_TOLERANCE)


def test_a_break_even_is_below_one_when_the_goal_is_not_met_now_and_above_when_it_is() -> None:
    below = sensitivity.break_even(lambda s: s <= 0.4, most=4.0, tolerance=TOY_TOLERANCE)
    above = sensitivity.break_even(lambda s: s <= 2.5, most=4.0, tolerance=TOY_TOLERANCE)
    assert below == pytest.approx(0.4, abs=TOY_TOLERANCE)
    assert above == pytest.approx(2.5, abs=TOY_TOLERANCE)


def test_a_goal_that_does_not_flip_in_range_has_no_break_even() -> None:
    assert sensitivity.break_even(lambda s: s <= 5.0, most=4.0) is None  # met throughout
    assert sensitivity.break_even(lambda s: s < -1.0, most=4.0) is None  # met nowhere


def test_a_knob_scales_its_inputs_together_and_leaves_the_others() -> None:
    lat = Latencies()
    boot, restart, save = sensitivity.knobs(lat)
    half = boot.scaled(lat, 0.5)
    assert (half.insert_s, half.boot_median_s) == (lat.insert_s / 2, lat.boot_median_s / 2)
    assert half.boot_sigma == lat.boot_sigma and half.restart_s == lat.restart_s
    assert boot.seconds(lat, 1.0) == lat.insert_s + lat.boot_median_s
    assert restart.scaled(lat, 0.0).restart_s == 0.0
    # The save on the notice must fit in it: it is scaled up to the notice at most.
    assert save.seconds(lat, save.most) == lat.notice_s


def test_a_replacement_ready_at_once_boots_in_no_time() -> None:
    boot = sensitivity.knobs(Latencies())[0]
    instant = boot.scaled(Latencies(), 0.0)
    assert instant.boots(random.Random(1), 3) == [0.0, 0.0, 0.0]


def test_over_the_model_the_break_even_is_where_the_goal_flips() -> None:
    lat = Latencies()
    cell = Cell(2, 2.0, 6.0, 3, (("L4", bench_gang_econ.MACHINES["L4"]),))
    boot = sensitivity.knobs(lat)[0]
    # A bound between the makespans at half and at full insert-to-ready time.
    half = cell.measure(gang_model.REPLACE_ONE, boot.scaled(lat, 0.5)).makespan
    now = cell.measure(gang_model.REPLACE_ONE, lat).makespan
    assert half < now
    goal = Goal(gang_model.REPLACE_ONE, (half + now) / 2)
    found = sensitivity.goal_break_even(cell, goal, boot, lat)
    assert not found.met_now and found.factor is not None and 0.5 < found.factor < 1.0
    assert goal.met(cell.measure(goal.strategy, boot.scaled(lat, found.factor)))
    past = found.factor + sensitivity.TOLERANCE
    assert not goal.met(cell.measure(goal.strategy, boot.scaled(lat, past)))


def test_the_savings_per_gpu_are_the_ones_the_benchmark_table_prints() -> None:
    lat = Latencies()
    machines = tuple(bench_gang_econ.MACHINES.items())
    measured = Cell(2, 1.0, 6.0, 2, machines).measure(gang_model.ELASTIC, lat)
    for gpu in bench_gang_econ.MACHINES:
        cells = bench_gang_econ.measure(gpu, 2, 1.0, 6.0, 2, lat)
        (table,) = [c for c in cells if c.strategy == gang_model.ELASTIC]
        assert measured.savings[gpu] == pytest.approx(table.savings)
        assert measured.makespan == pytest.approx(table.makespan)


def test_the_goals_bisected_are_the_benchmark_s() -> None:
    goals = bench_gang_econ.goals_of(bench_gang_econ.MACHINES)
    labels = {goal.label for goal in goals}
    assert f"{gang_model.REPLACE_ONE}: makespan <= +10 %" in labels
    assert f"{gang_model.ELASTIC}: makespan <= +5 %" in labels
    assert f"{gang_model.ELASTIC}: T4 >= 60.0 % cheaper" in labels
    floor = bench_gang_econ.spot_discount("L4") - 2
    assert f"{gang_model.REPLACE_ONE}: L4 >= {floor:.1f} % cheaper" in labels


def test_the_benchmark_prints_what_it_would_take_for_a_4_node_gang(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--gpus", "L4", "--nodes", "4", "--rates", "1", "--seeds", "1", "--handlers", ""]
    assert bench_gang_econ.main(args) == 0
    out = capsys.readouterr().out
    assert "what it would take to meet the goals" in out
    assert f"| {gang_model.REPLACE_ONE}: makespan <= +10 % |" in out
    assert "restart_s = 20: assumption" in out  # each input with its source
    assert "| replace-one, warm spare |" in out and "grows declined" in out
