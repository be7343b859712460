"""The machine catalog: machine id -> machine type, GPUs and prices.

The catalog ships as ``shared/data/machines.json`` so placement needs no
network; ``machines/{id}`` in Firestore is seeded from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

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


@cache
def load_catalog() -> dict[str, Machine]:
    text = resources.files("shared").joinpath("data/machines.json").read_text()
    raw = json.loads(text)["machines"]
    return {
        machine_id: Machine(machine_id=machine_id, **fields) for machine_id, fields in raw.items()
    }
