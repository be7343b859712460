"""A VM with GPUs cannot live-migrate: Compute Engine refuses
``onHostMaintenance: MIGRATE`` for one (GPUs attached, or built into its machine
type: G2, A2, A3), and a Spot VM that restarts automatically. spotline never
sends either; the local cloud refuses both, as Compute Engine does."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud import compute_v1

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters import gce_gang, gce_requests
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.vms import GangRequest, Provisioning, VmRequest
from tests.unit.test_gce_compute import vm_request

ZONE = "us-central1-a"
BUILT_IN = sorted(
    {m.machine_type for m in load_catalog().values() if m.gpu_count and not m.attaches_gpus}
)


@pytest.mark.parametrize("machine_type", BUILT_IN)
def test_an_on_demand_vm_with_built_in_gpus_terminates_on_host_maintenance(
    machine_type: str,
) -> None:
    request = vm_request(
        provisioning=Provisioning.STANDARD, machine_type=machine_type, accelerators=()
    )
    assert gce_requests.scheduling(request).on_host_maintenance == "TERMINATE"


def test_an_on_demand_gang_of_g2_machines_terminates_on_host_maintenance(
    compute: GceCompute, cloud: LocalCloud
) -> None:
    nodes = tuple(
        vm_request(
            name=f"sl-g-a1-n{i}",
            machine_type="g2-standard-8",
            provisioning=Provisioning.STANDARD,
            accelerators=(),
        )
        for i in range(2)
    )
    gang = GangRequest(nodes, "us-central1", (ZONE,), "6b1f2c3d-0000-4000-8000-000000000001")

    compute.insert_gang(gang)

    [sent] = cloud.requests_to("POST", "/bulkInsert")
    scheduling = sent.body["instanceProperties"]["scheduling"]
    assert scheduling["onHostMaintenance"] == "TERMINATE"
    assert gce_gang.instance_properties(nodes[0]).scheduling.on_host_maintenance == "TERMINATE"


def insert_raw(
    cloud: LocalCloud, machine_type: str, scheduling: dict[str, Any], **extra: Any
) -> Any:
    """An insert as another client might send it: the real client library, any body."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    client = compute_v1.InstancesClient(
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=cloud.endpoint),
    )
    instance = compute_v1.Instance(
        name="raw-vm",
        machine_type=f"zones/{ZONE}/machineTypes/{machine_type}",
        scheduling=compute_v1.Scheduling(**scheduling),
        **extra,
    )
    return client.insert_unary(project=cloud.project, zone=ZONE, instance_resource=instance)


@pytest.mark.parametrize(
    ("machine_type", "accelerators"),
    [
        ("g2-standard-8", []),
        ("a3-highgpu-1g", []),
        ("n1-standard-8", [("nvidia-tesla-t4", 1)]),
    ],
)
def test_the_local_cloud_refuses_live_migration_for_a_vm_with_gpus(
    cloud: LocalCloud, machine_type: str, accelerators: list[tuple[str, int]]
) -> None:
    guest = [
        compute_v1.AcceleratorConfig(
            accelerator_type=f"zones/{ZONE}/acceleratorTypes/{kind}", accelerator_count=n
        )
        for kind, n in accelerators
    ]
    for scheduling in (
        {"provisioning_model": "STANDARD", "on_host_maintenance": "MIGRATE"},
        {"provisioning_model": "STANDARD"},  # MIGRATE is the default
    ):
        with pytest.raises(Exception) as refused:
            insert_raw(cloud, machine_type, scheduling, guest_accelerators=guest)
        assert refused.value.code == 400  # type: ignore[attr-defined]
        assert refused.value.message.endswith(  # type: ignore[attr-defined]
            "Instances with guest accelerators do not support live migration."
        )
    assert cloud.list() == []


def test_the_local_cloud_lets_a_vm_without_gpus_live_migrate(cloud: LocalCloud) -> None:
    insert_raw(cloud, "e2-standard-4", {"provisioning_model": "STANDARD"})
    assert [vm["name"] for vm in cloud.list()] == ["raw-vm"]


@pytest.mark.parametrize(
    "scheduling",
    [
        {"provisioning_model": "SPOT", "on_host_maintenance": "TERMINATE"},
        {"provisioning_model": "SPOT", "automatic_restart": True},
    ],
)
def test_the_local_cloud_refuses_a_spot_vm_that_restarts_automatically(
    cloud: LocalCloud, scheduling: dict[str, Any]
) -> None:
    with pytest.raises(Exception) as refused:
        insert_raw(cloud, "e2-standard-4", scheduling)
    assert refused.value.code == 400  # type: ignore[attr-defined]
    assert refused.value.message.endswith("when AutomaticRestart is true.")  # type: ignore[attr-defined]


def test_an_on_demand_fallback_on_an_a2_machine_is_placed(compute: GceCompute) -> None:
    request = VmRequest(
        name="sl-j-a1",
        zone=ZONE,
        machine_type="a2-highgpu-1g",
        provisioning=Provisioning.STANDARD,
        request_id="9d1f2c3d-0000-4000-8000-000000000002",
        image="projects/p/global/images/family/spotline-gpu",
    )
    assert compute.insert(request).name == "sl-j-a1"
