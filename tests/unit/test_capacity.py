"""capacity(): whole VMs that fit in a region's quota headroom."""

from __future__ import annotations

import dataclasses

from spotline.shared.domain.capacity import capacity, charges
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.vms import Provisioning, Quota

SPOT, STANDARD = Provisioning.SPOT, Provisioning.STANDARD
CATALOG = load_catalog()


def quotas(**limits_and_usages: tuple[float, float]) -> dict[str, Quota]:
    return {
        metric: Quota(metric, limit, usage) for metric, (limit, usage) in limits_and_usages.items()
    }


def test_a_machine_without_gpus_is_bound_by_its_vcpus() -> None:
    e2 = CATALOG["e2-standard-4"]  # 4 vCPUs

    assert capacity(e2, STANDARD, quotas(CPUS=(24.0, 10.0), NVIDIA_T4_GPUS=(0.0, 0.0))) == 3


def test_the_tightest_quota_wins() -> None:
    t4x4 = CATALOG["n1-standard-16-t4x4"]  # 16 vCPUs, 4 T4s

    assert capacity(t4x4, STANDARD, quotas(CPUS=(96.0, 0.0), NVIDIA_T4_GPUS=(10.0, 1.0))) == 2
    assert capacity(t4x4, STANDARD, quotas(CPUS=(40.0, 0.0), NVIDIA_T4_GPUS=(64.0, 0.0))) == 2


def test_an_exhausted_quota_leaves_no_room() -> None:
    l4 = CATALOG["g2-standard-4"]

    assert capacity(l4, STANDARD, quotas(CPUS=(24.0, 0.0), NVIDIA_L4_GPUS=(1.0, 1.0))) == 0


def test_usage_over_the_limit_is_no_room_not_a_negative_count() -> None:
    # Usage passes the limit when a limit is lowered below what already runs.
    l4 = CATALOG["g2-standard-4"]

    assert capacity(l4, STANDARD, quotas(CPUS=(24.0, 0.0), NVIDIA_L4_GPUS=(2.0, 5.0))) == 0


def test_spot_counts_against_granted_preemptible_quota() -> None:
    t4 = CATALOG["n1-standard-8-t4"]
    region = quotas(
        CPUS=(96.0, 0.0),
        PREEMPTIBLE_CPUS=(96.0, 0.0),
        NVIDIA_T4_GPUS=(1.0, 1.0),
        PREEMPTIBLE_NVIDIA_T4_GPUS=(8.0, 3.0),
    )

    assert capacity(t4, SPOT, region) == 5
    assert capacity(t4, STANDARD, region) == 0


def test_spot_falls_back_to_standard_quota_where_none_is_granted() -> None:
    t4 = CATALOG["n1-standard-8-t4"]
    standard = quotas(CPUS=(96.0, 0.0), NVIDIA_T4_GPUS=(4.0, 1.0))
    not_granted = {**standard, **quotas(PREEMPTIBLE_NVIDIA_T4_GPUS=(0.0, 0.0))}

    assert capacity(t4, SPOT, standard) == 3
    assert capacity(t4, SPOT, not_granted) == 3


def test_each_metric_falls_back_on_its_own() -> None:
    t4 = CATALOG["n1-standard-8-t4"]  # 8 vCPUs
    region = quotas(
        CPUS=(16.0, 0.0), NVIDIA_T4_GPUS=(0.0, 0.0), PREEMPTIBLE_NVIDIA_T4_GPUS=(8.0, 0.0)
    )

    assert capacity(t4, SPOT, region) == 2  # preemptible GPUs, standard CPUs


def test_no_listed_metric_is_unknown() -> None:
    l4 = CATALOG["g2-standard-4"]

    assert capacity(l4, SPOT, {}) is None
    assert capacity(l4, SPOT, quotas(INSTANCES=(100.0, 0.0))) is None


def test_a_gpu_without_a_known_metric_is_unknown() -> None:
    b200 = dataclasses.replace(CATALOG["a2-highgpu-1g"], gpu_type="nvidia-b200")

    assert capacity(b200, STANDARD, quotas(CPUS=(96.0, 0.0))) is None


def test_charges_add_gpus_of_one_metric_and_skip_unknown_types() -> None:
    gpus = [("nvidia-l4", 2), ("nvidia-l4", 2), ("nvidia-b200", 8)]

    assert charges("g2-standard-48", 48, gpus, STANDARD, {}) == {"CPUS": 48, "NVIDIA_L4_GPUS": 4}
    assert charges("e2-standard-4", 0, [], STANDARD, {}) == {}


def test_the_projects_global_gpu_quota_binds_every_gpu_machine() -> None:
    """A new project's GPUS_ALL_REGIONS is 0: no GPU VM fits, whatever the
    region's own GPU quotas say; a machine without GPUs is not charged to it."""
    t4x4 = CATALOG["n1-standard-16-t4x4"]
    e2 = CATALOG["e2-standard-4"]
    region = quotas(CPUS=(96.0, 0.0), NVIDIA_T4_GPUS=(16.0, 0.0))

    assert capacity(t4x4, STANDARD, {**region, **quotas(GPUS_ALL_REGIONS=(0.0, 0.0))}) == 0
    assert capacity(t4x4, STANDARD, {**region, **quotas(GPUS_ALL_REGIONS=(10.0, 1.0))}) == 2
    assert capacity(t4x4, SPOT, {**region, **quotas(GPUS_ALL_REGIONS=(10.0, 1.0))}) == 2
    assert capacity(e2, STANDARD, {**region, **quotas(GPUS_ALL_REGIONS=(0.0, 0.0))}) == 24
