"""Prices of machine parts, and a machine's price as their sum.

Compute Engine bills a GPU VM for its parts: each vCPU and each GB of memory
at its machine family's rate, each GPU at its model's rate, Spot and on demand
priced apart. The price file (``shared/data/prices.json``) keeps those rates
for one region, with the date they were read and where from, so that
``spotline machines`` can say how old its prices are;
``spotline machines --refresh-prices`` rewrites it from the Cloud Billing
Catalog API (``spotline.shared.domain.sku_prices``).

A part is named ``FAMILY/vcpu``, ``FAMILY/memory_gb`` (``n1``, ``g2``, ``a2``,
``a3``, ``e2``) or ``gpu/GPU_TYPE`` (``gpu/nvidia-l4``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Kind = Literal["spot", "on_demand"]


class Rate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spot: float = Field(ge=0)
    on_demand: float = Field(ge=0)


class PriceBook(BaseModel):
    """The content of the price file."""

    model_config = ConfigDict(extra="forbid")

    priced_at: str  # the date the prices were read, ISO (2025-06-01)
    source: str  # where they were read
    region: str
    currency: Literal["USD"] = "USD"
    components: dict[str, Rate]  # part -> USD per hour (per GB per hour for memory)


def family(machine_type: str) -> str:
    """``n1`` for ``n1-standard-8``: the family whose vCPU and memory rates apply."""
    return machine_type.split("-", 1)[0]


def parts(shape: Mapping[str, object]) -> dict[str, float]:
    """The parts a machine is billed for, and how many of each."""
    name = family(str(shape["machine_type"]))
    counted = {
        f"{name}/vcpu": float(str(shape["vcpus"])),
        f"{name}/memory_gb": float(str(shape["memory_gb"])),
    }
    if shape.get("gpu_type"):
        counted[f"gpu/{shape['gpu_type']}"] = float(str(shape["gpu_count"]))
    return counted


def needed(shapes: Iterable[Mapping[str, object]]) -> set[str]:
    """Every part the machines need a price for."""
    return {part for shape in shapes for part in parts(shape)}


def machine_price(shape: Mapping[str, object], prices: PriceBook, kind: Kind) -> float:
    """USD per hour of a machine, ``kind`` (Spot or on demand).

    Raises:
        KeyError: the price file has no rate for one of its parts.
    """
    total = 0.0
    for part, count in parts(shape).items():
        rate = prices.components.get(part)
        if rate is None:
            raise KeyError(f"prices.json has no rate for {part}")
        total += count * getattr(rate, kind)
    return round(total, 4)
