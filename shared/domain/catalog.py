"""The machine catalog: machine id -> machine type, GPUs and prices.

The catalog ships as two files so placement needs no network:
``shared/data/machines.json`` holds the shapes (Compute Engine's GPU machine
types, and the zones of each GPU model by region), ``shared/data/prices.json``
the prices of their parts (per vCPU and GB of memory of each family, per GPU
model; Spot and on demand), dated (``spotline.shared.domain.prices``). A machine's
price is the sum of its parts, as Compute Engine bills it. ``machines/{id}``
in Firestore is seeded from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from spotline.shared.domain.prices import PriceBook, machine_price

# Machine types whose GPUs come built in (no guestAccelerators on the request).
_BUILT_IN_GPU_FAMILIES = ("a2-", "a3-", "g2-")


@dataclass(frozen=True)
class Machine:
    machine_id: str
    machine_type: str
    gpu_type: str | None
    gpu_count: int
    vcpus: int
    memory_gb: float
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float

    @property
    def attaches_gpus(self) -> bool:
        """True when the GPUs must be requested as guestAccelerators."""
        return self.gpu_count > 0 and not self.machine_type.startswith(_BUILT_IN_GPU_FAMILIES)


def _data(name: str) -> str:
    return resources.files("spotline.shared").joinpath(f"data/{name}").read_text()


@cache
def shapes() -> dict[str, dict[str, object]]:
    """The machines of ``machines.json`` without prices, by machine id."""
    raw: dict[str, dict[str, object]] = json.loads(_data("machines.json"))["machines"]
    return raw


@cache
def gpu_zones() -> dict[str, dict[str, list[str]]]:
    """The zones of each GPU model, by region (``gpu_zones(...)[gpu][region]``)."""
    raw: dict[str, dict[str, list[str]]] = json.loads(_data("machines.json"))["gpu_zones"]
    return raw


@cache
def shipped_prices() -> PriceBook:
    return PriceBook.model_validate_json(_data("prices.json"))


def priced(prices: PriceBook) -> dict[str, Machine]:
    """Every machine with its Spot and on-demand price from ``prices``."""
    machines = {}
    for machine_id, shape in shapes().items():
        fields = {
            "machine_type": str(shape["machine_type"]),
            "gpu_type": shape["gpu_type"] if shape["gpu_type"] is None else str(shape["gpu_type"]),
            "gpu_count": int(str(shape["gpu_count"])),
            "vcpus": int(str(shape["vcpus"])),
            "memory_gb": float(str(shape["memory_gb"])),
        }
        machines[machine_id] = Machine(
            machine_id=machine_id,
            spot_usd_per_hour=machine_price(fields, prices, "spot"),
            on_demand_usd_per_hour=machine_price(fields, prices, "on_demand"),
            **fields,  # type: ignore[arg-type]
        )
    return machines


@cache
def load_catalog() -> dict[str, Machine]:
    return priced(shipped_prices())


def built_in_gpus(machine_type: str) -> int:
    """The GPUs ``machine_type`` comes with (G2, A2, A3), as the catalog counts
    them; 0 for a type whose GPUs are attached, or that has none.

    A type of those families outside the catalog counts as one GPU: what it
    has is unknown, but not that it has some.
    """
    for machine in load_catalog().values():
        if machine.machine_type == machine_type:
            return 0 if machine.attaches_gpus else machine.gpu_count
    return 1 if machine_type.startswith(_BUILT_IN_GPU_FAMILIES) else 0
