"""Compute Engine's quotas as its API names them: only ``Quota.metric`` values
of the compute v1 discovery document; vCPUs charged to their family's metric
(``A2_CPUS``) where it has one; every GPU charged to the project's global
``GPUS_ALL_REGIONS`` too. A quota whose limit is 0 can never be met by
waiting: the job ends FAILED at once, naming it and how to ask for more."""

from __future__ import annotations

import dataclasses

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.infra.localcloud.quotas import DEFAULT_LIMITS
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.domain.capacity import (
    GPU_METRICS,
    SPOT_GPU_METRICS,
    capacity,
    charges,
    cpu_metric,
)
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.errors import CapacityError, Unplaceable
from spotline.shared.domain.states import JobStatus
from spotline.shared.domain.vms import Accelerator, Provisioning, Quota
from tests.discovery import enum
from tests.local_cloud import client
from tests.unit.test_gce_compute import vm_request
from tests.unit.test_placement_errors import SPEC, message, submit, world

METRICS = set(enum("compute", "Quota", "metric"))
CATALOG = load_catalog()
# Two requestIds (Compute Engine takes UUIDs only).
ID_1 = "11111111-1111-4111-8111-111111111111"
ID_2 = "22222222-2222-4222-8222-222222222222"
SPOT, STANDARD = Provisioning.SPOT, Provisioning.STANDARD


def test_every_metric_spotline_and_the_local_cloud_name_is_one_of_the_api() -> None:
    named = {
        *DEFAULT_LIMITS,
        *GPU_METRICS.values(),
        *SPOT_GPU_METRICS.values(),
        *(cpu_metric(m.machine_type) for m in CATALOG.values()),
    }
    assert named - METRICS == set()


def test_a_family_s_vcpus_are_charged_to_its_own_metric() -> None:
    assert cpu_metric("a2-highgpu-1g") == "A2_CPUS"
    assert cpu_metric("n2-standard-8") == "N2_CPUS"
    assert cpu_metric("c2-standard-8") == "C2_CPUS"
    # N1 and E2 count against CPUS, and so do G2 and A3 (no family metric in the API).
    general = ("n1-standard-8", "e2-standard-4", "g2-standard-8", "a3-highgpu-1g")
    assert {cpu_metric(t) for t in general} == {"CPUS"}
    a2 = CATALOG["a2-highgpu-1g"]
    assert charges(a2.machine_type, a2.vcpus, [("nvidia-tesla-a100", 1)], STANDARD, {}) == {
        "A2_CPUS": 12,
        "NVIDIA_A100_GPUS": 1,
    }
    # A Spot VM: the PREEMPTIBLE_ twins where the project has them.
    limits = {"PREEMPTIBLE_CPUS": 24.0, "PREEMPTIBLE_NVIDIA_A100_GPUS": 2.0}
    assert charges(a2.machine_type, a2.vcpus, [("nvidia-tesla-a100", 1)], SPOT, limits) == {
        "PREEMPTIBLE_CPUS": 12,
        "PREEMPTIBLE_NVIDIA_A100_GPUS": 1,
    }


def test_capacity_of_an_a2_machine_is_bound_by_a2_cpus() -> None:
    a2 = CATALOG["a2-highgpu-1g"]
    quotas = {
        "CPUS": Quota("CPUS", 1000.0, 0.0),
        "A2_CPUS": Quota("A2_CPUS", 12.0, 0.0),
        "NVIDIA_A100_GPUS": Quota("NVIDIA_A100_GPUS", 8.0, 0.0),
    }
    assert capacity(a2, STANDARD, quotas) == 1


def test_the_local_cloud_charges_an_a2_vm_to_a2_cpus(cloud: LocalCloud) -> None:
    cloud.quota_limits["A2_CPUS"] = 12.0
    compute = client(cloud)
    a2 = dict(machine_type="a2-highgpu-1g", accelerators=(), provisioning=STANDARD)
    compute.insert(vm_request(name="a2-one", request_id=ID_1, **a2))  # type: ignore[arg-type]

    with pytest.raises(CapacityError, match="A2_CPUS"):
        compute.insert(vm_request(name="a2-two", request_id=ID_2, **a2))  # type: ignore[arg-type]
    listed = {q.metric: q for q in compute.region_quotas("us-central1").values()}
    assert (listed["A2_CPUS"].usage, listed["CPUS"].usage) == (12.0, 0.0)
    assert "GPUS_ALL_REGIONS" not in listed  # a project's quota, not a region's


def test_gpus_all_regions_counts_every_gpu_of_every_region() -> None:
    zones = {"us-central1": ("us-central1-a",), "europe-west4": ("europe-west4-a",)}
    with LocalCloud("p", RecordLauncher(), zones=zones) as cloud:
        cloud.quota_limits["GPUS_ALL_REGIONS"] = 1.0
        compute = client(cloud)
        compute.insert(vm_request(name="here", request_id=ID_1))  # a Spot T4

        with pytest.raises(CapacityError, match="GPUS_ALL_REGIONS"):
            compute.insert(vm_request(name="there", zone="europe-west4-a", request_id=ID_2))
        [quota] = [q for q in cloud.project_quotas() if q["metric"] == "GPUS_ALL_REGIONS"]
        assert (quota["limit"], quota["usage"]) == (1.0, 1.0)


def test_a_quota_whose_limit_is_0_is_refused_for_good_naming_it(cloud: LocalCloud) -> None:
    cloud.quota_limits["GPUS_ALL_REGIONS"] = 0.0

    with pytest.raises(Unplaceable) as refused:
        client(cloud).insert(vm_request(accelerators=(Accelerator("nvidia-tesla-t4", 1),)))

    detail = refused.value.detail
    assert "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally." in detail
    assert "gcloud compute project-info describe" in detail
    assert "console.cloud.google.com/iam-admin/quotas" in detail


def test_a_regional_quota_whose_limit_is_0_is_refused_for_good(cloud: LocalCloud) -> None:
    cloud.quota_limits["NVIDIA_L4_GPUS"] = 0.0

    with pytest.raises(Unplaceable, match="NVIDIA_L4_GPUS") as refused:
        client(cloud).insert(
            vm_request(machine_type="g2-standard-4", accelerators=(), provisioning=STANDARD)
        )
    assert "gcloud compute regions describe us-central1" in refused.value.detail


def test_a_job_in_a_project_without_gpu_quota_ends_failed_at_once(cloud: LocalCloud) -> None:
    cloud.quota_limits["GPUS_ALL_REGIONS"] = 0.0
    deps, store = world(cloud)

    submit(message(SPEC, "m1"), deps)

    ended = store.get_job("job1")
    assert ended is not None and ended.status == JobStatus.FAILED
    assert ended.error is not None and "GPUS_ALL_REGIONS" in ended.error
    assert "Limit: 0.0 globally" in ended.error and "request an increase" in ended.error
    assert store.get_queue("job1") is None
    user = store.get_user("alice")
    assert user is not None and (user.active_jobs, user.active_instances) == ([], [])


def test_a_quota_used_up_but_above_0_is_still_waited_for(cloud: LocalCloud) -> None:
    cloud.quota_limits["PREEMPTIBLE_NVIDIA_T4_GPUS"] = 0.0
    cloud.quota_limits["NVIDIA_T4_GPUS"] = 1.0
    compute: GceCompute = client(cloud)
    compute.insert(vm_request(name="first", request_id=ID_1))

    with pytest.raises(CapacityError, match="NVIDIA_T4_GPUS"):
        compute.insert(vm_request(name="second", request_id=ID_2))


def test_an_h100_on_demand_vm_has_no_regional_gpu_metric() -> None:
    h100 = CATALOG["a3-highgpu-1g"]
    quotas = {"CPUS": Quota("CPUS", 26.0, 0.0)}
    assert capacity(h100, STANDARD, quotas) == 1
    assert capacity(dataclasses.replace(h100, gpu_type="nvidia-b200"), STANDARD, quotas) is None
