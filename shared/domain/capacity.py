"""How many more VMs of a machine id the project's regional quotas leave room for.

Compute Engine counts every VM against the region's allocation quotas: its
vCPUs against ``CPUS``, its GPUs against their model's metric (``NVIDIA_L4_GPUS``).
A Spot VM counts against the ``PREEMPTIBLE_`` twin of a metric once Compute
Engine has granted the project that quota in the region, and against the
standard metric where it has not ("Quotas for Spot VMs",
https://cloud.google.com/compute/docs/instances/spot#quotas). The local cloud
applies the same rules to its local VMs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from spotline.shared.domain.catalog import Machine
from spotline.shared.domain.vms import Provisioning, Quota

# The regional quota metric of each GPU type in the catalog, as regions.get
# names it (the Quota.metric values of the Compute Engine v1 API).
GPU_METRICS = {
    "nvidia-tesla-t4": "NVIDIA_T4_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-tesla-v100": "NVIDIA_V100_GPUS",
    "nvidia-tesla-p100": "NVIDIA_P100_GPUS",
}
# Every catalog machine's vCPUs are counted against CPUS. The API also lists
# family metrics (E2_CPUS, A2_CPUS, N2_CPUS; none for N1 or G2), but which
# families they replace CPUS for could not be verified in Compute Engine's
# documentation, so they are left out: for an A2 machine, CPUS may be the
# wrong bound.
CPU_METRIC = "CPUS"
PREEMPTIBLE_PREFIX = "PREEMPTIBLE_"


def demand(vcpus: int, gpus: Iterable[tuple[str, int]]) -> dict[str, int]:
    """The standard metrics one VM consumes, and how much of each.

    GPU types without a known metric are not counted.
    """
    needs = {CPU_METRIC: vcpus} if vcpus > 0 else {}
    for gpu_type, count in gpus:
        metric = GPU_METRICS.get(gpu_type)
        if metric is not None and count > 0:
            needs[metric] = needs.get(metric, 0) + count
    return needs


def charged_metric(metric: str, provisioning: Provisioning, limits: Mapping[str, float]) -> str:
    """The metric a VM is charged to for ``metric``: the preemptible twin for
    Spot where the project has that quota (a limit above 0), else ``metric``."""
    preemptible = PREEMPTIBLE_PREFIX + metric
    if provisioning == Provisioning.SPOT and limits.get(preemptible, 0) > 0:
        return preemptible
    return metric


def capacity(
    machine: Machine, provisioning: Provisioning, quotas: Mapping[str, Quota]
) -> int | None:
    """Whole VMs of ``machine`` that fit in the headroom (limit - usage) of
    every quota they are charged to; never negative.

    Returns:
        None when no quota they are charged to is listed, or when the
        machine's GPU type has no known metric: any number would be a guess.
    """
    if machine.gpu_count and machine.gpu_type not in GPU_METRICS:
        return None
    gpus = [(machine.gpu_type, machine.gpu_count)] if machine.gpu_type else []
    limits = {metric: quota.limit for metric, quota in quotas.items()}
    fits = []
    for metric, amount in demand(machine.vcpus, gpus).items():
        quota = quotas.get(charged_metric(metric, provisioning, limits))
        if quota is not None:
            fits.append(max(0, math.floor((quota.limit - quota.usage) / amount)))
    return min(fits) if fits else None
