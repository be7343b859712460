import pytest

from spotline.shared.domain.pricing import (
    CoolingRule,
    cooling_cost,
    cooling_price,
    savings_percent,
    vm_cost,
)

RULE = CoolingRule()  # the default: BASELINE 10 min, UNIT_PERCENTAGE 1 %
SPOT, OD = 0.30, 1.30  # a 1.00 $/h gap


@pytest.mark.parametrize(
    ("minute", "price"),
    [(0, 0.30), (10, 0.30), (11, 0.31), (60, 0.80), (110, 1.30), (200, 1.30)],
)
def test_cooling_price_at_the_seed_minutes(minute: int, price: float) -> None:
    assert cooling_price(SPOT, OD, minute * 60, RULE) == pytest.approx(price)


def test_the_price_steps_on_whole_minutes() -> None:
    assert cooling_price(SPOT, OD, 10 * 60 + 59, RULE) == pytest.approx(0.30)
    assert cooling_price(SPOT, OD, 11 * 60, RULE) == pytest.approx(0.31)


def test_other_rules_and_degenerate_prices() -> None:
    fast = CoolingRule(baseline_min=0, unit=0.5)
    assert cooling_price(SPOT, OD, 60, fast) == pytest.approx(0.80)
    assert cooling_price(SPOT, OD, 180, fast) == pytest.approx(1.30)
    assert cooling_price(1.0, 0.5, 3600, RULE) == 1.0  # no gap: stays at the Spot price
    with pytest.raises(ValueError):
        CoolingRule(unit=0)


def test_cooling_cost_sums_each_minute_at_its_price() -> None:
    # Minutes 0-10 start at or before the baseline (0.30); the one from 11:00 costs 0.31.
    assert cooling_cost(SPOT, OD, 12 * 60, RULE) == pytest.approx((11 * 0.30 + 0.31) / 60)
    assert cooling_cost(SPOT, OD, 30, RULE) == pytest.approx(0.30 * 30 / 3600)
    # Past 110 minutes every minute costs the on-demand price.
    later = cooling_cost(SPOT, OD, 121 * 60, RULE) - cooling_cost(SPOT, OD, 120 * 60, RULE)
    assert later == pytest.approx(OD / 60)


def test_vm_cost_and_savings() -> None:
    assert vm_cost(0.36, 1800) == pytest.approx(0.18)
    assert savings_percent(0.3, 1.0) == 70.0
    assert savings_percent(0.0, 0.0) is None
