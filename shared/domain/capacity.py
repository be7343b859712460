"""How many more VMs of a machine id the project's regional quotas leave room for.

Compute Engine counts every VM against the region's allocation quotas: its
vCPUs against its machine family's metric (``A2_CPUS``, ``N2_CPUS``...) or,
for N1, E2, G2 and A3, ``CPUS``; its GPUs against their model's
metric (``NVIDIA_L4_GPUS``); and every GPU, in any region, against the
project's global ``GPUS_ALL_REGIONS``. A Spot VM counts against the
``PREEMPTIBLE_`` metric (``PREEMPTIBLE_CPUS``, ``PREEMPTIBLE_NVIDIA_L4_GPUS``)
once Compute Engine has granted the project that quota in the region, and
against the standard metric where it has not ("Quotas for Spot VMs",
https://cloud.google.com/compute/docs/instances/spot#quotas). Every name is a
``Quota.metric`` value of the Compute Engine v1 API. The local cloud applies
the same rules to its local VMs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from spotline.shared.domain.catalog import Machine
from spotline.shared.domain.vms import Provisioning, Quota

# The regional quota metric of each GPU type in the catalog, as regions.get
# names it (the Quota.metric values of the Compute Engine v1 API). The API
# names no on-demand metric for H100s, only their Spot twin.
GPU_METRICS = {
    "nvidia-tesla-t4": "NVIDIA_T4_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-tesla-v100": "NVIDIA_V100_GPUS",
    "nvidia-tesla-p100": "NVIDIA_P100_GPUS",
}
PREEMPTIBLE_PREFIX = "PREEMPTIBLE_"
SPOT_GPU_METRICS = {
    **{gpu: PREEMPTIBLE_PREFIX + metric for gpu, metric in GPU_METRICS.items()},
    "nvidia-h100-80gb": "PREEMPTIBLE_NVIDIA_H100_GPUS",
}
CPU_METRIC = "CPUS"
SPOT_CPU_METRIC = PREEMPTIBLE_PREFIX + CPU_METRIC
# Machine families whose vCPUs Compute Engine counts against a metric of their
# own instead of CPUS (the *_CPUS values of Quota.metric). N1 and E2 count
# against CPUS, and so do G2 and A3, which the API names no metric for.
FAMILY_CPU_METRICS = {
    family: f"{family.upper()}_CPUS"
    for family in (
        "a2",
        "c2",
        "c2d",
        "c3",
        "m1",
        "m2",
        "m3",
        "n2",
        "n2a",
        "n2d",
        "t2a",
        "t2d",
    )
}
# The project's global quota on GPUs, every region and model together: 0 in a
# new project until an increase is granted.
GLOBAL_GPU_METRIC = "GPUS_ALL_REGIONS"
GLOBAL_METRICS = frozenset({GLOBAL_GPU_METRIC})


def cpu_metric(machine_type: str) -> str:
    """The regional metric ``machine_type``'s vCPUs are counted against."""
    return FAMILY_CPU_METRICS.get(machine_type.split("-", 1)[0], CPU_METRIC)


def charges(
    machine_type: str,
    vcpus: int,
    gpus: Iterable[tuple[str, int]],
    provisioning: Provisioning,
    limits: Mapping[str, float],
) -> dict[str, int]:
    """The regional metrics one VM is charged to, and how much of each.

    A Spot VM is charged to a metric's preemptible twin where the project has
    that quota (a limit above 0 in ``limits``), else to the standard metric.
    GPU types without a known metric are not counted.
    """
    needs: dict[str, int] = {}

    def charge(standard: str | None, spot: str | None, amount: int) -> None:
        spot_quota = spot is not None and limits.get(spot, 0) > 0
        metric = spot if provisioning == Provisioning.SPOT and spot_quota else standard
        if metric is not None and amount > 0:
            needs[metric] = needs.get(metric, 0) + amount

    charge(cpu_metric(machine_type), SPOT_CPU_METRIC, vcpus)
    for gpu_type, count in gpus:
        charge(GPU_METRICS.get(gpu_type), SPOT_GPU_METRICS.get(gpu_type), count)
    return needs


def capacity(
    machine: Machine, provisioning: Provisioning, quotas: Mapping[str, Quota]
) -> int | None:
    """Whole VMs of ``machine`` that fit in the headroom (limit - usage) of
    every quota they are charged to; never negative.

    Returns:
        None when no quota they are charged to is listed, or when the
        machine's GPU type has no known metric: any number would be a guess.
    """
    if machine.gpu_count and machine.gpu_type not in SPOT_GPU_METRICS:
        return None
    gpus = [(machine.gpu_type, machine.gpu_count)] if machine.gpu_type else []
    limits = {metric: quota.limit for metric, quota in quotas.items()}
    needs = charges(machine.machine_type, machine.vcpus, gpus, provisioning, limits)
    if machine.gpu_count:
        needs[GLOBAL_GPU_METRIC] = machine.gpu_count  # every GPU, Spot or not
    fits = []
    for metric, amount in needs.items():
        quota = quotas.get(metric)
        if quota is not None:
            fits.append(max(0, math.floor((quota.limit - quota.usage) / amount)))
    return min(fits) if fits else None
