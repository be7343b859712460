"""GceCompute.insert_gang through the real google-cloud-compute client, against a local cloud."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters import gce_gang
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.adapters.gce_requests import VM_SCOPES
from spotline.shared.domain.errors import CapacityError, PermanentError, TransientError
from spotline.shared.domain.vms import (
    JOB_METADATA_KEY,
    MANAGED_LABEL,
    Accelerator,
    GangRequest,
    Provisioning,
    Vm,
    VmRequest,
    VmState,
)
from tests.local_cloud import (
    add_instance,
    assert_an_endless_operation_is_transient,
    assert_refused_as,
    client,
    vm_keys,
)

REGION = "us-central1"
ZONE_A, ZONE_B, ZONE_C = "us-central1-a", "us-central1-b", "us-central1-c"
MACHINE = "g2-standard-4"
IMAGE = "projects/spotline-test/global/images/family/spotline-gpu"
REQUEST_ID = "5a0c7e52-3f4d-5b8e-9c1a-2d3e4f5a6b7c"
JOB_DOCUMENT = json.dumps({"job_id": "j-9", "attempt": 1, "nodes": 3})
SHARED_LABELS = {MANAGED_LABEL: "true", "spotline-job": "j-9", "spotline-attempt": "1"}
NAMES = ["sl-j-9-a1-n0", "sl-j-9-a1-n1", "sl-j-9-a1-n2"]


def node(rank: int) -> VmRequest:
    return VmRequest(
        name=NAMES[rank],
        zone=ZONE_A,
        machine_type=MACHINE,
        provisioning=Provisioning.SPOT,
        request_id=REQUEST_ID,
        image=IMAGE,
        labels={**SHARED_LABELS, "spotline-rank": str(rank)},
        metadata={JOB_METADATA_KEY: JOB_DOCUMENT},
        accelerators=(Accelerator("nvidia-l4", 1),),
        disk_gb=200,
        service_account="spotline-vm@spotline-test.iam.gserviceaccount.com",
    )


def gang(zones: tuple[str, ...] = (ZONE_A, ZONE_B), request_id: str = REQUEST_ID) -> GangRequest:
    return GangRequest(
        nodes=tuple(node(rank) for rank in range(3)),
        region=REGION,
        zones=zones,
        request_id=request_id,
    )


def test_one_bulk_insert_creates_all_or_nothing(compute: GceCompute, cloud: LocalCloud) -> None:
    compute.insert_gang(gang())

    [sent] = cloud.requests_to("POST", "/instances/bulkInsert")
    assert sent.path == f"/compute/v1/projects/spotline-test/regions/{REGION}/instances/bulkInsert"
    assert sent.query == {"requestId": REQUEST_ID}
    body = sent.body
    # int64 fields travel as JSON strings (the proto3 JSON mapping).
    assert (body["count"], body["minCount"]) == ("3", "3")
    assert sorted(body["perInstanceProperties"]) == NAMES
    assert body["locationPolicy"] == {
        "targetShape": "ANY_SINGLE_ZONE",
        "locations": {
            f"zones/{ZONE_A}": {"preference": "ALLOW"},
            f"zones/{ZONE_B}": {"preference": "ALLOW"},
        },
    }
    properties = body["instanceProperties"]
    assert properties["machineType"] == MACHINE
    assert properties["guestAccelerators"] == [
        {"acceleratorType": "nvidia-l4", "acceleratorCount": 1}
    ]
    assert properties["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",
    }
    # Per-instance properties hold only names: a per-node label cannot travel.
    assert properties["labels"] == SHARED_LABELS
    assert properties["metadata"]["items"] == [{"key": JOB_METADATA_KEY, "value": JOB_DOCUMENT}]
    [disk] = properties["disks"]
    assert disk["initializeParams"] == {"sourceImage": IMAGE, "diskSizeGb": "200"}
    assert disk["boot"] is True and disk["autoDelete"] is True
    [interface] = properties["networkInterfaces"]
    assert interface["accessConfigs"] == [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    assert properties["serviceAccounts"] == [
        {
            "email": "spotline-vm@spotline-test.iam.gserviceaccount.com",
            "scopes": list(VM_SCOPES),
        }
    ]


def test_the_nodes_land_in_one_zone_and_come_back_in_order(cloud: LocalCloud) -> None:
    cloud.operation_polls = 2

    vms = client(cloud).insert_gang(gang())

    assert [(vm.name, vm.zone, vm.state, vm.machine_type) for vm in vms] == [
        (name, ZONE_A, VmState.RUNNING, MACHINE) for name in NAMES
    ]
    assert vm_keys(cloud) == [(ZONE_A, name) for name in NAMES]
    waits = cloud.requests_to("POST", "/wait")
    assert len(waits) == 2
    assert waits[0].path.startswith(
        f"/compute/v1/projects/spotline-test/regions/{REGION}/operations/"
    )
    [listed] = cloud.requests_to("GET", "/aggregated/instances")
    assert listed.query == {
        "filter": '(labels.spotline = "true") AND (labels.spotline-attempt = "1") '
        'AND (labels.spotline-job = "j-9")'
    }


def test_a_full_zone_sends_every_node_to_the_next(compute: GceCompute, cloud: LocalCloud) -> None:
    cloud.fail_inserts(ZONE_A, MACHINE)

    vms = compute.insert_gang(gang())

    assert {vm.zone for vm in vms} == {ZONE_B}
    assert vm_keys(cloud) == [(ZONE_B, name) for name in NAMES]


@pytest.mark.parametrize(
    ("reason", "status"),
    [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", None),
        ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", None),
        ("QUOTA_EXCEEDED", None),
        ("insufficientCapacity", 503),
        ("quotaExceeded", 403),
    ],
)
def test_no_zone_for_every_node_is_a_capacity_error(
    compute: GceCompute, cloud: LocalCloud, reason: str, status: int | None
) -> None:
    for zone in (ZONE_A, ZONE_B):
        cloud.fail_inserts(zone, MACHINE, reason, status=status)

    with pytest.raises(CapacityError) as raised:
        compute.insert_gang(gang())

    assert raised.value.reason == reason
    assert not cloud.list()


def test_a_retry_with_the_same_request_id_creates_nothing_new(
    compute: GceCompute, cloud: LocalCloud
) -> None:
    first = compute.insert_gang(gang())
    second = compute.insert_gang(gang())

    assert first == second
    assert len(cloud.list()) == 3
    assert len(cloud.requests_to("POST", "/instances/bulkInsert")) == 2


def test_existing_nodes_are_returned(compute: GceCompute, cloud: LocalCloud) -> None:
    existing = [
        add_instance(cloud, ZONE_B, name, labels=node(rank).labels, machine_type=MACHINE)
        for rank, name in enumerate(NAMES)
    ]

    vms = compute.insert_gang(gang(request_id="6f1d0b3c-8e52-4a74-9baf-2c3d4e5f6071"))

    assert [vm.id for vm in vms] == [instance["id"] for instance in existing]
    assert len(cloud.list()) == 3


def test_an_operation_that_finds_the_nodes_there_returns_them(
    compute: GceCompute, cloud: LocalCloud
) -> None:
    for rank, name in enumerate(NAMES):
        add_instance(cloud, ZONE_C, name, labels=node(rank).labels, machine_type=MACHINE)
    for zone in (ZONE_A, ZONE_B):
        cloud.fail_inserts(zone, MACHINE, "RESOURCE_ALREADY_EXISTS")

    vms = compute.insert_gang(gang())

    assert [(vm.name, vm.zone) for vm in vms] == [(name, ZONE_C) for name in NAMES]


@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [
        (503, "backendError", TransientError),
        (403, "rateLimitExceeded", TransientError),
        (400, "invalid", PermanentError),
    ],
)
def test_other_bulk_insert_errors(
    compute: GceCompute,
    cloud: LocalCloud,
    status: int,
    reason: str,
    error: type[Exception],
) -> None:
    cloud.fail_next("POST", "/bulkInsert$", status, reason)

    assert_refused_as(error, lambda: compute.insert_gang(gang()))


def test_a_region_operation_that_never_finishes_is_transient(cloud: LocalCloud) -> None:
    assert_an_endless_operation_is_transient(cloud, lambda compute: compute.insert_gang(gang()))


def test_nodes_that_differ_in_more_than_names_are_never_sent(
    compute: GceCompute, cloud: LocalCloud
) -> None:
    mixed = dataclasses.replace(
        gang(), nodes=(node(0), dataclasses.replace(node(1), machine_type="g2-standard-8"))
    )

    with pytest.raises(PermanentError):
        compute.insert_gang(mixed)

    assert not cloud.requests


@pytest.mark.parametrize(
    "broken",
    [
        dataclasses.replace(gang(), zones=()),
        dataclasses.replace(gang(), zones=("europe-west4-a",)),
        dataclasses.replace(gang(), nodes=(node(0), node(0))),
    ],
)
def test_a_gang_one_bulk_insert_cannot_make_is_permanent(broken: GangRequest) -> None:
    with pytest.raises(PermanentError):
        gce_gang.bulk_insert_request("spotline-test", broken)


def found(*ranks: int, zone: str = ZONE_A) -> list[Vm]:
    return [Vm(NAMES[r], zone, VmState.RUNNING, node(r).labels, MACHINE) for r in ranks]


def test_a_node_preempted_before_it_is_read_comes_back_terminated() -> None:
    vms = gce_gang.gang_vms(gang(), found(2, 0))

    assert vms is not None
    assert [(vm.name, vm.zone, vm.state) for vm in vms] == [
        (NAMES[0], ZONE_A, VmState.RUNNING),
        (NAMES[1], ZONE_A, VmState.TERMINATED),
        (NAMES[2], ZONE_A, VmState.RUNNING),
    ]


def test_no_node_found_is_none_and_names_in_two_zones_are_permanent() -> None:
    assert gce_gang.gang_vms(gang(), []) is None
    with pytest.raises(PermanentError):
        gce_gang.gang_vms(gang(), found(0) + found(1, zone=ZONE_B))
