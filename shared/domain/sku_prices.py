"""From Cloud Billing Catalog SKUs to the rates of machine parts (``prices``).

Compute Engine's service (``services/6F81-5844-456A``) lists one SKU per part,
region group and way of buying. The rates spotline needs are told apart by the
SKU's description, its category's usage type and its service regions:

* ``N1 Predefined Instance Core running in Americas``, usage ``OnDemand``:
  ``n1/vcpu`` on demand; ``Spot Preemptible N1 Predefined Instance Core ...``,
  usage ``Preemptible``: its Spot rate. ``... Instance Ram ...`` is per GiB
  hour: ``n1/memory_gb``. G2, A2, A3 and E2 read ``G2 Instance Core`` and so on.
* ``Nvidia Tesla T4 GPU running in Americas``: ``gpu/nvidia-tesla-t4`` on
  demand; its Spot rate is ``Nvidia Tesla T4 GPU attached to Spot Preemptible
  VMs running in Americas``, usage ``Preemptible`` (the catalog's wording for
  nearly every Spot GPU; a few read ``Spot Preemptible Nvidia ... GPU``, also
  taken).

Anything else (commitments, reservations, virtual workstations, other
regions) is not a rate spotline uses. A rate the catalog needs that no SKU
gives is an error that names it: a partial answer must not become a price
file with holes.

Pure: the caller turns the client's ``Sku`` objects into ``SkuRate``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from spotline.shared.domain.prices import Rate

COMPUTE_SERVICE = "services/6F81-5844-456A"

# Description -> part; the GPU's SKU name -> type. A Spot part says so before
# ("Spot Preemptible ") or, for a GPU, after (" attached to Spot Preemptible VMs").
_SPOT_PREFIX = "Spot Preemptible "
_SPOT_GPU_SUFFIX = " attached to Spot Preemptible VMs"
_RESOURCE = re.compile(
    rf"^(?P<prefix>{_SPOT_PREFIX})?"
    r"(?:(?P<family>N1 Predefined|G2|A2|A3|E2) Instance (?P<what>Core|Ram)"
    rf"|Nvidia (?P<gpu>[A-Za-z0-9 ]+?) GPU(?P<suffix>{_SPOT_GPU_SUFFIX})?)"
    r" running in "
)
_FAMILIES = {"N1 Predefined": "n1", "G2": "g2", "A2": "a2", "A3": "a3", "E2": "e2"}
_GPUS = {
    "Tesla T4": "nvidia-tesla-t4",
    "L4": "nvidia-l4",
    "Tesla A100": "nvidia-tesla-a100",
    "A100 80GB": "nvidia-a100-80gb",
    "Tesla A100 80GB": "nvidia-a100-80gb",
    "H100 80GB": "nvidia-h100-80gb",
    "Tesla V100": "nvidia-tesla-v100",
    "Tesla P100": "nvidia-tesla-p100",
}
_KINDS = {"OnDemand": "on_demand", "Preemptible": "spot"}
_UNITS = {"Core": "h", "Ram": "GiBy.h", None: "h"}


class PriceError(ValueError):
    """The SKUs do not price every part the catalog needs (names them)."""


@dataclass(frozen=True)
class SkuRate:
    """What spotline reads of one SKU."""

    sku_id: str
    description: str
    usage_type: str  # the category's: OnDemand, Preemptible, Commit1Yr, ...
    regions: tuple[str, ...]
    usage_unit: str  # h, GiBy.h
    usd: float  # the rate of the first tier (these SKUs have one)


def part_of(sku: SkuRate) -> tuple[str, str] | None:
    """``(part, kind)`` of a SKU spotline uses, or None."""
    kind = _KINDS.get(sku.usage_type)
    match = _RESOURCE.match(sku.description)
    if kind is None or match is None:
        return None
    said_spot = bool(match["prefix"] or match["suffix"])
    if (kind == "spot") != said_spot:
        return None
    what = match["what"]
    if sku.usage_unit != _UNITS[what]:
        return None
    if match["gpu"] is not None:
        gpu = _GPUS.get(match["gpu"])
        return (f"gpu/{gpu}", kind) if gpu else None
    name = _FAMILIES[match["family"]]
    return (f"{name}/vcpu" if what == "Core" else f"{name}/memory_gb"), kind


def rates(skus: Iterable[SkuRate], region: str, needed: set[str]) -> dict[str, Rate]:
    """The Spot and on-demand rate of every part in ``needed``, in ``region``.

    Raises:
        PriceError: a part has no Spot or no on-demand SKU in the region, or
            two SKUs give one part two different rates.
    """
    found: dict[tuple[str, str], float] = {}
    clashes = []
    for sku in skus:
        known = part_of(sku)
        if known is None or known[0] not in needed or region not in sku.regions:
            continue
        before = found.setdefault(known, sku.usd)
        if before != sku.usd:
            clashes.append(f"{known[0]} {known[1]}: {before} and {sku.usd} ({sku.sku_id})")
    missing = [
        f"{part} {kind.replace('_', '-')}"
        for part in sorted(needed)
        for kind in ("spot", "on_demand")
        if (part, kind) not in found
    ]
    problems = []
    if missing:
        problems.append(f"no SKU in {region} for: {', '.join(missing)}")
    if clashes:
        problems.append(f"two rates for one part: {'; '.join(clashes)}")
    if problems:
        raise PriceError("; ".join(problems))
    return {
        part: Rate(spot=found[(part, "spot")], on_demand=found[(part, "on_demand")])
        for part in sorted(needed)
    }
