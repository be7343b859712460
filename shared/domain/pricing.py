"""What VM time costs: Spot and on-demand prices, and the cooling escalation.

A cooling Spot instance (held idle for its user's next job) costs its Spot
price for a BASELINE period; after that, each further minute adds
UNIT_PERCENTAGE of the gap to the on-demand price, so it reaches the on-demand
price 1/UNIT_PERCENTAGE minutes after the baseline and stays there (the
rule: holding scarce Spot capacity idle is charged as what it costs others).
Prices step once a minute, on whole minutes held.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CoolingRule:
    baseline_min: int = 10  # BASELINE
    unit: float = 0.01  # UNIT_PERCENTAGE, as a fraction of the gap per minute

    def __post_init__(self) -> None:
        if self.baseline_min < 0 or not 0 < self.unit <= 1:
            raise ValueError("baseline_min must be >= 0 and unit in (0, 1]")


def cooling_price(spot: float, on_demand: float, held_s: float, rule: CoolingRule) -> float:
    """The hourly price of a cooling Spot instance held ``held_s`` seconds."""
    minutes_past = int(max(held_s, 0.0) // 60) - rule.baseline_min
    if minutes_past <= 0 or on_demand <= spot:
        return spot
    return spot + min(1.0, rule.unit * minutes_past) * (on_demand - spot)


def cooling_cost(spot: float, on_demand: float, held_s: float, rule: CoolingRule) -> float:
    """Dollars for holding a cooling Spot instance ``held_s`` seconds: each
    minute at the price in force during it."""
    held_s = max(held_s, 0.0)
    whole, rest = int(held_s // 60), held_s % 60
    total = 0.0
    for minute in range(whole):
        total += cooling_price(spot, on_demand, minute * 60, rule) / 60
    total += cooling_price(spot, on_demand, whole * 60, rule) * rest / 3600
    return total


def vm_cost(price_per_hour: float, seconds: float) -> float:
    """Dollars for ``seconds`` of VM time at a fixed hourly price."""
    return price_per_hour * max(seconds, 0.0) / 3600


def savings_percent(cost: float, on_demand_cost: float) -> float | None:
    """How much less than on demand the job cost, in percent (None: no cost yet)."""
    if on_demand_cost <= 0:
        return None
    return round(100.0 * (1.0 - cost / on_demand_cost), 1)
