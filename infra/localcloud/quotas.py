"""The local cloud's regional quotas: the limits it is given, the usage of the
live VMs of a region, and the check that refuses VMs that would pass a limit.

Every region has the same limits. Each VM is charged
as Compute Engine charges it (``spotline.shared.domain.capacity``): its vCPUs and GPUs, looked
up in the catalog, against ``CPUS`` and its GPU model's metric, or against their
``PREEMPTIBLE_`` twins for a Spot VM where those have a limit above 0. A metric
without a limit is not enforced; a machine type outside the catalog is charged
only the GPUs its request attaches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spotline.infra.localcloud.errors import QuotaExceeded
from spotline.shared.domain.capacity import (
    CPU_METRIC,
    GPU_METRICS,
    PREEMPTIBLE_PREFIX,
    charged_metric,
    demand,
)
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.vms import Provisioning

# Room enough that no local run meets a limit unless told to (`spotline up --quota`).
DEFAULT_LIMITS: dict[str, float] = {
    **{
        name: 16.0
        for metric in GPU_METRICS.values()
        for name in (metric, PREEMPTIBLE_PREFIX + metric)
    },
    CPU_METRIC: 384.0,
    PREEMPTIBLE_PREFIX + CPU_METRIC: 384.0,
}


@dataclass(frozen=True)
class Charge:
    """What one VM consumes: standard metric -> amount, and how it is provisioned."""

    provisioning: Provisioning
    needs: Mapping[str, int]


def vm_charge(
    machine_type: str, provisioning: Provisioning, accelerators: Iterable[tuple[str, int]]
) -> Charge:
    """The charge of a VM: the vCPUs of its machine type, and the GPUs it
    attaches or its machine type has built in."""
    machine = next((m for m in load_catalog().values() if m.machine_type == machine_type), None)
    gpus = list(accelerators)
    if machine is not None and machine.gpu_type and not machine.attaches_gpus:
        gpus.append((machine.gpu_type, machine.gpu_count))
    return Charge(provisioning, demand(machine.vcpus if machine else 0, gpus))


def usage(limits: Mapping[str, float], charges: Iterable[Charge]) -> dict[str, float]:
    """How much of each metric the charges consume (every limited metric listed)."""
    used = dict.fromkeys(limits, 0.0)
    for charge in charges:
        for metric, amount in charge.needs.items():
            charged = charged_metric(metric, charge.provisioning, limits)
            used[charged] = used.get(charged, 0.0) + amount
    return used


def quota_listing(limits: Mapping[str, float], live: Iterable[Charge]) -> list[dict[str, Any]]:
    """The quotas as ``regions.get`` lists them."""
    used = usage(limits, live)
    return [
        {"metric": metric, "limit": limit, "usage": used[metric]}
        for metric, limit in sorted(limits.items())
    ]


def check_quota(
    region: str, limits: Mapping[str, float], live: Iterable[Charge], new: Iterable[Charge]
) -> None:
    """Refuse ``new`` VMs, all of them, when they would take a metric past its limit.

    Raises:
        QuotaExceeded: naming the first metric past its limit.
    """
    used = usage(limits, live)
    for metric, amount in usage(limits, new).items():
        limit = limits.get(metric)
        if amount > 0 and limit is not None and used[metric] + amount > limit:
            raise QuotaExceeded(metric, limit, region)
