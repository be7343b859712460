"""The local cloud's quotas: the limits it is given, the usage of its live VMs,
and the checks that refuse VMs that would pass a limit.

Every region has the same regional limits; ``GPUS_ALL_REGIONS`` is the
project's, over every region (``projects.get`` lists it, ``regions.get`` does
not). Each VM is charged as Compute Engine charges it
(``spotline.shared.domain.capacity``): its vCPUs and GPUs, looked up in the
catalog, against its family's CPU metric and its GPU model's metric, or their
``PREEMPTIBLE_`` twins for a Spot VM where those have a limit above 0; and its
GPUs, Spot or not, against ``GPUS_ALL_REGIONS``. A metric without a limit is
not enforced; a machine type outside the catalog is charged only the GPUs its
request attaches. Every metric is a ``Quota.metric`` value of the v1 API.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spotline.infra.localcloud.errors import QuotaExceeded
from spotline.shared.domain.capacity import (
    CPU_METRIC,
    FAMILY_CPU_METRICS,
    GLOBAL_GPU_METRIC,
    GLOBAL_METRICS,
    GPU_METRICS,
    SPOT_CPU_METRIC,
    SPOT_GPU_METRICS,
    charges,
)
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.vms import Provisioning

# Room enough that no local run meets a limit unless told to (`spotline up --quota`).
DEFAULT_LIMITS: dict[str, float] = {
    **dict.fromkeys([*GPU_METRICS.values(), *SPOT_GPU_METRICS.values()], 16.0),
    **dict.fromkeys([CPU_METRIC, SPOT_CPU_METRIC, *FAMILY_CPU_METRICS.values()], 384.0),
    GLOBAL_GPU_METRIC: 64.0,
}


@dataclass(frozen=True)
class Charge:
    """What one VM consumes, before the project's limits say which metrics."""

    provisioning: Provisioning
    machine_type: str
    vcpus: int
    gpus: tuple[tuple[str, int], ...]

    def needs(self, limits: Mapping[str, float]) -> dict[str, int]:
        """Metric -> amount: the regional metrics, and ``GPUS_ALL_REGIONS``."""
        found = charges(self.machine_type, self.vcpus, self.gpus, self.provisioning, limits)
        gpus = sum(count for _, count in self.gpus)
        return {**found, GLOBAL_GPU_METRIC: gpus} if gpus else found


def vm_charge(
    machine_type: str, provisioning: Provisioning, accelerators: Iterable[tuple[str, int]]
) -> Charge:
    """The charge of a VM: the vCPUs of its machine type, and the GPUs it
    attaches or its machine type has built in."""
    machine = next((m for m in load_catalog().values() if m.machine_type == machine_type), None)
    gpus = list(accelerators)
    if machine is not None and machine.gpu_type and not machine.attaches_gpus:
        gpus.append((machine.gpu_type, machine.gpu_count))
    return Charge(provisioning, machine_type, machine.vcpus if machine else 0, tuple(gpus))


def usage(limits: Mapping[str, float], live: Iterable[Charge]) -> dict[str, float]:
    """How much of each metric the charges consume (every limited metric listed)."""
    used = dict.fromkeys(limits, 0.0)
    for charge in live:
        for metric, amount in charge.needs(limits).items():
            used[metric] = used.get(metric, 0.0) + amount
    return used


def quota_listing(
    limits: Mapping[str, float], live: Iterable[Charge], *, project: bool = False
) -> list[dict[str, Any]]:
    """The quotas as ``regions.get`` lists them, or ``projects.get`` (``project``)."""
    used = usage(limits, live)
    return [
        {"metric": metric, "limit": limit, "usage": used[metric]}
        for metric, limit in sorted(limits.items())
        if (metric in GLOBAL_METRICS) == project
    ]


def check_quota(
    region: str,
    limits: Mapping[str, float],
    live: Iterable[Charge],
    new: Iterable[Charge],
    *,
    everywhere: Iterable[Charge],
) -> None:
    """Refuse ``new`` VMs, all of them, when they would take a metric past its
    limit: a regional one with the region's ``live`` VMs, a global one with
    the VMs of ``everywhere``.

    Raises:
        QuotaExceeded: naming the first metric past its limit.
    """
    new = list(new)
    regional, total = usage(limits, live), usage(limits, everywhere)
    for metric, amount in usage(limits, new).items():
        limit = limits.get(metric)
        used = (total if metric in GLOBAL_METRICS else regional).get(metric, 0.0)
        if amount > 0 and limit is not None and used + amount > limit:
            raise QuotaExceeded(metric, limit, None if metric in GLOBAL_METRICS else region)
