"""GceCompute through the real google-cloud-compute client, against a local cloud."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.shared.adapters import gce_requests
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.adapters.gce_requests import ErrorKind
from spotline.shared.domain.errors import (
    CapacityError,
    PermanentError,
    SpotlineError,
    TransientError,
)
from spotline.shared.domain.vms import (
    JOB_METADATA_KEY,
    MANAGED_LABEL,
    Accelerator,
    Provisioning,
    Quota,
    VmRequest,
    VmState,
)
from tests.local_cloud import (
    add_instance,
    assert_an_endless_operation_is_transient,
    assert_refused_as,
    client,
)

ZONE = "us-central1-a"
IMAGE = "projects/spotline-test/global/images/family/spotline-gpu"
JOB_DOCUMENT = json.dumps({"job_id": "j-42", "attempt": 1, "bucket": "gs://spotline-test"})


def vm_request(
    *,
    name: str = "spotline-j-42-a1",
    zone: str = ZONE,
    machine_type: str = "n1-standard-8",
    provisioning: Provisioning = Provisioning.SPOT,
    request_id: str = "2f6c1d0e-5b7a-4c8e-9d3f-0a1b2c3d4e5f",
    accelerators: tuple[Accelerator, ...] = (Accelerator("nvidia-tesla-t4", 1),),
) -> VmRequest:
    return VmRequest(
        name=name,
        zone=zone,
        machine_type=machine_type,
        provisioning=provisioning,
        request_id=request_id,
        image=IMAGE,
        labels={MANAGED_LABEL: "true", "job": "j-42"},
        metadata={JOB_METADATA_KEY: JOB_DOCUMENT},
        accelerators=accelerators,
        disk_gb=150,
        service_account="spotline-vm@spotline-test.iam.gserviceaccount.com",
    )


def test_insert_sends_a_spot_gpu_instance(compute: GceCompute, cloud: LocalCloud) -> None:
    vm = compute.insert(vm_request())

    assert (vm.name, vm.zone, vm.state, vm.machine_type) == (
        "spotline-j-42-a1",
        ZONE,
        VmState.RUNNING,
        "n1-standard-8",
    )
    [sent] = cloud.requests_to("POST", f"/zones/{ZONE}/instances")
    assert sent.path == f"/compute/v1/projects/spotline-test/zones/{ZONE}/instances"
    assert sent.query == {"requestId": "2f6c1d0e-5b7a-4c8e-9d3f-0a1b2c3d4e5f"}
    body = sent.body
    assert body["name"] == "spotline-j-42-a1"
    assert body["machineType"] == f"zones/{ZONE}/machineTypes/n1-standard-8"
    assert body["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",
    }
    assert body["guestAccelerators"] == [
        {"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 1}
    ]
    assert body["labels"] == {"spotline": "true", "job": "j-42"}
    [item] = body["metadata"]["items"]
    assert item["key"] == JOB_METADATA_KEY
    assert json.loads(item["value"]) == {
        "job_id": "j-42",
        "attempt": 1,
        "bucket": "gs://spotline-test",
    }
    [disk] = body["disks"]
    # int64 fields travel as JSON strings (the proto3 JSON mapping).
    assert disk["initializeParams"] == {"sourceImage": IMAGE, "diskSizeGb": "150"}
    assert disk["boot"] is True and disk["autoDelete"] is True
    [interface] = body["networkInterfaces"]
    assert interface["accessConfigs"] == [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    assert body["serviceAccounts"] == [
        {
            "email": "spotline-vm@spotline-test.iam.gserviceaccount.com",
            # Narrowed from cloud-platform: events, checkpoints, logs, and the
            # Ops Agent's metrics (Cloud Monitoring refuses them without it).
            "scopes": [
                "https://www.googleapis.com/auth/pubsub",
                "https://www.googleapis.com/auth/devstorage.read_write",
                "https://www.googleapis.com/auth/logging.write",
                "https://www.googleapis.com/auth/monitoring.write",
            ],
        }
    ]


def test_a_standard_gpu_vm_terminates_on_host_maintenance(
    compute: GceCompute, cloud: LocalCloud
) -> None:
    compute.insert(vm_request(provisioning=Provisioning.STANDARD))

    [sent] = cloud.requests_to("POST", "/instances")
    assert sent.body["scheduling"] == {
        "provisioningModel": "STANDARD",
        "automaticRestart": True,
        "onHostMaintenance": "TERMINATE",
    }


def test_a_standard_vm_without_gpus_live_migrates() -> None:
    request = vm_request(provisioning=Provisioning.STANDARD, accelerators=())

    assert gce_requests.scheduling(request).on_host_maintenance == "MIGRATE"
    assert not gce_requests.instance_resource(request).guest_accelerators


def test_insert_waits_for_the_operation(cloud: LocalCloud) -> None:
    cloud.operation_polls = 3

    client(cloud).insert(vm_request())

    waits = cloud.requests_to("POST", "/wait")
    assert len(waits) == 3
    assert waits[0].path.startswith(f"/compute/v1/projects/spotline-test/zones/{ZONE}/operations/")


def test_an_operation_that_never_finishes_is_transient(cloud: LocalCloud) -> None:
    assert_an_endless_operation_is_transient(cloud, lambda compute: compute.insert(vm_request()))


def test_inserting_the_same_request_twice_makes_one_vm(
    compute: GceCompute, cloud: LocalCloud
) -> None:
    first = compute.insert(vm_request())
    second = compute.insert(vm_request())

    assert first == second
    assert len(cloud.list()) == 1
    assert len(cloud.requests_to("POST", "/instances")) == 2


def test_inserting_an_existing_name_returns_that_vm(compute: GceCompute, cloud: LocalCloud) -> None:
    existing = add_instance(cloud, ZONE, "spotline-j-42-a1", labels={"spotline": "true"})

    vm = compute.insert(vm_request(request_id="5e0c9a2b-7d41-4f63-8a9e-1b2c3d4e5f60"))

    assert vm.id == existing["id"]
    assert len(cloud.list()) == 1


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (503, "ZONE_RESOURCE_POOL_EXHAUSTED"),
        (503, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"),
        (403, "quotaExceeded"),
    ],
)
def test_a_capacity_error_from_the_insert_call(
    compute: GceCompute, cloud: LocalCloud, status: int, reason: str
) -> None:
    cloud.fail_inserts(ZONE, "n1-standard-8", reason, status=status)

    with pytest.raises(CapacityError) as raised:
        compute.insert(vm_request())

    assert raised.value.reason == reason
    assert "does not have enough resources" in str(raised.value)
    assert not cloud.list()


@pytest.mark.parametrize("reason", ["ZONE_RESOURCE_POOL_EXHAUSTED", "QUOTA_EXCEEDED"])
def test_a_capacity_error_inside_the_operation(
    compute: GceCompute, cloud: LocalCloud, reason: str
) -> None:
    cloud.fail_inserts(ZONE, "n1-standard-8", reason)

    with pytest.raises(CapacityError) as raised:
        compute.insert(vm_request())

    assert raised.value.reason == reason
    assert cloud.requests_to("POST", "/wait")
    assert not cloud.list()


def test_a_gpu_the_zone_does_not_offer_is_a_capacity_error(
    compute: GceCompute, cloud: LocalCloud
) -> None:
    message = (
        "Invalid value for field 'resource.guestAccelerators[0].acceleratorType': "
        f"'zones/{ZONE}/acceleratorTypes/nvidia-l4'. "
        f"Accelerator type 'nvidia-l4' does not exist in zone '{ZONE}'."
    )
    cloud.fail_inserts(ZONE, "g2-standard-8", "invalid", status=400, message=message)

    with pytest.raises(CapacityError):
        compute.insert(vm_request(machine_type="g2-standard-8"))


@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [
        (503, "backendError", TransientError),
        (500, "internalError", TransientError),
        (429, "rateLimitExceeded", TransientError),
        (403, "rateLimitExceeded", TransientError),
        (400, "invalid", PermanentError),
        (403, "forbidden", PermanentError),
    ],
)
def test_other_insert_errors(
    compute: GceCompute,
    cloud: LocalCloud,
    status: int,
    reason: str,
    error: type[Exception],
) -> None:
    cloud.fail_next("POST", "/instances$", status, reason)

    assert_refused_as(error, lambda: compute.insert(vm_request()))


def test_an_unreachable_api_is_transient(cloud: LocalCloud) -> None:
    endpoint = cloud.endpoint
    cloud.close()
    compute = GceCompute("spotline-test", api_endpoint=endpoint, credentials=AnonymousCredentials())

    with pytest.raises(TransientError):
        compute.insert(vm_request())


def test_get_of_a_missing_vm_is_none(compute: GceCompute) -> None:
    assert compute.get(ZONE, "spotline-nothing-here") is None


def test_get_reads_the_vm(compute: GceCompute, cloud: LocalCloud) -> None:
    add_instance(cloud, ZONE, "spotline-j-7-a2", labels={"job": "j-7"}, status="TERMINATED")

    vm = compute.get(ZONE, "spotline-j-7-a2")

    assert vm is not None
    assert (vm.zone, vm.state, vm.labels) == (ZONE, VmState.TERMINATED, {"job": "j-7"})


def test_get_and_list_read_when_compute_engine_made_the_vm() -> None:
    """creationTimestamp, with its offset: an ended job is charged from it for a
    VM its attempts never recorded (``spotline.shared.domain.unrecorded_vms``)."""
    made = datetime(2026, 11, 23, 12, 0, 5, 250000, tzinfo=UTC)
    with LocalCloud("spotline-test", RecordLauncher(), clock=lambda: made) as cloud:
        compute = client(cloud)
        inserted = compute.insert(vm_request())
        [listed] = compute.list({"job": "j-42"})
    assert inserted.created_at == listed.created_at == made
    # Compute Engine writes its own offset; the instant is what counts.
    assert gce_requests.creation_time("2026-11-23T04:00:05.250-08:00") == made
    assert gce_requests.creation_time("") is None
    assert gce_requests.creation_time("yesterday") is None


def test_reads_retry_a_503(compute: GceCompute, cloud: LocalCloud) -> None:
    add_instance(cloud, ZONE, "spotline-j-42-a1")
    cloud.fail_next("GET", "/instances/spotline-j-42-a1$", 503)

    assert compute.get(ZONE, "spotline-j-42-a1") is not None
    assert len(cloud.requests_to("GET", "/instances/spotline-j-42-a1")) == 2


def test_reads_give_up_as_transient(compute: GceCompute, cloud: LocalCloud) -> None:
    cloud.fail_next("GET", "/aggregated/instances$", 503, times=1000)

    with pytest.raises(TransientError):
        compute.list({MANAGED_LABEL: "true"})


def test_delete_of_a_missing_vm_succeeds(compute: GceCompute, cloud: LocalCloud) -> None:
    compute.delete(ZONE, "spotline-nothing-here")

    assert [r.method for r in cloud.requests] == ["DELETE"]


def test_delete_removes_the_vm(compute: GceCompute, cloud: LocalCloud) -> None:
    add_instance(cloud, ZONE, "spotline-j-42-a1")

    compute.delete(ZONE, "spotline-j-42-a1")

    assert not cloud.list()
    [sent] = cloud.requests_to("DELETE", "/instances/spotline-j-42-a1")
    assert (
        sent.path == f"/compute/v1/projects/spotline-test/zones/{ZONE}/instances/spotline-j-42-a1"
    )


def test_stop_then_start_keeps_the_vm(compute: GceCompute, cloud: LocalCloud) -> None:
    add_instance(cloud, ZONE, "spotline-j-42-a1")

    assert compute.stop(ZONE, "spotline-j-42-a1") is True
    stopped = compute.get(ZONE, "spotline-j-42-a1")
    assert stopped is not None and stopped.state == VmState.TERMINATED
    compute.start(ZONE, "spotline-j-42-a1")
    started = compute.get(ZONE, "spotline-j-42-a1")
    assert started is not None and started.state == VmState.RUNNING

    base = f"/compute/v1/projects/spotline-test/zones/{ZONE}/instances/spotline-j-42-a1"
    [stop] = cloud.requests_to("POST", "/instances/spotline-j-42-a1/stop")
    [start] = cloud.requests_to("POST", "/instances/spotline-j-42-a1/start")
    assert (stop.path, start.path) == (f"{base}/stop", f"{base}/start")
    # Each waited on its zone operation through the same endpoint.
    assert len(cloud.requests_to("POST", "/wait")) >= 2


def test_stop_of_a_missing_vm_is_false_and_start_is_permanent(compute: GceCompute) -> None:
    assert compute.stop(ZONE, "spotline-nothing-here") is False
    with pytest.raises(PermanentError, match="start spotline-nothing-here"):
        compute.start(ZONE, "spotline-nothing-here")


def test_list_finds_labelled_vms_in_every_zone(compute: GceCompute, cloud: LocalCloud) -> None:
    for zone, name, job in [
        ("us-central1-a", "spotline-j-1-a1", "j-1"),
        ("europe-west4-b", "spotline-j-1-a2", "j-1"),
        ("us-central1-a", "spotline-j-2-a1", "j-2"),
    ]:
        add_instance(cloud, zone, name, labels={"spotline": "true", "job": job})
    add_instance(cloud, "us-central1-a", "someone-elses-vm")

    vms = compute.list({"spotline": "true", "job": "j-1"})

    assert sorted((vm.zone, vm.name) for vm in vms) == [
        ("europe-west4-b", "spotline-j-1-a2"),
        ("us-central1-a", "spotline-j-1-a1"),
    ]
    [sent] = cloud.requests_to("GET", "/aggregated/instances")
    assert sent.path == "/compute/v1/projects/spotline-test/aggregated/instances"
    assert sent.query == {"filter": '(labels.job = "j-1") AND (labels.spotline = "true")'}


def test_set_metadata_sends_the_fingerprint_and_keeps_other_items(
    compute: GceCompute, cloud: LocalCloud
) -> None:
    vm = add_instance(
        cloud,
        ZONE,
        "spotline-j-42-a1",
        metadata={JOB_METADATA_KEY: "{}", "startup-script": "#!/bin/sh"},
    )
    fingerprint = vm["metadata"]["fingerprint"]

    compute.set_metadata(ZONE, "spotline-j-42-a1", {JOB_METADATA_KEY: JOB_DOCUMENT})

    [sent] = cloud.requests_to("POST", "/instances/spotline-j-42-a1/setMetadata")
    assert sent.body["fingerprint"] == fingerprint
    items = {
        item["key"]: item["value"]
        for item in (cloud.instance(ZONE, "spotline-j-42-a1") or {})["metadata"]["items"]
    }
    assert items == {JOB_METADATA_KEY: JOB_DOCUMENT, "startup-script": "#!/bin/sh"}


def test_a_concurrent_metadata_change_is_transient(compute: GceCompute, cloud: LocalCloud) -> None:
    add_instance(cloud, ZONE, "spotline-j-42-a1")
    cloud.fail_next("POST", "/setMetadata$", 412, "conditionNotMet")

    with pytest.raises(TransientError):
        compute.set_metadata(ZONE, "spotline-j-42-a1", {JOB_METADATA_KEY: JOB_DOCUMENT})


def test_set_metadata_of_a_missing_vm_is_permanent(compute: GceCompute) -> None:
    with pytest.raises(PermanentError):
        compute.set_metadata(ZONE, "spotline-nothing-here", {JOB_METADATA_KEY: JOB_DOCUMENT})


def test_region_quotas_reads_the_region(compute: GceCompute, cloud: LocalCloud) -> None:
    cloud.quota_limits.clear()
    cloud.quota_limits.update(
        {"CPUS": 24.0, "NVIDIA_T4_GPUS": 4.0, "PREEMPTIBLE_NVIDIA_T4_GPUS": 16}
    )
    compute.insert(vm_request(provisioning=Provisioning.STANDARD))  # 8 vCPUs and a T4
    sent_before = len(cloud.requests)

    quotas = compute.region_quotas("us-central1")

    assert quotas == {
        "CPUS": Quota("CPUS", 24.0, 8.0),
        "NVIDIA_T4_GPUS": Quota("NVIDIA_T4_GPUS", 4.0, 1.0),
        "PREEMPTIBLE_NVIDIA_T4_GPUS": Quota("PREEMPTIBLE_NVIDIA_T4_GPUS", 16.0, 0.0),
    }
    [sent] = cloud.requests[sent_before:]
    assert (sent.method, sent.path) == (
        "GET",
        "/compute/v1/projects/spotline-test/regions/us-central1",
    )
    assert (sent.query, sent.body) == ({}, None)


def test_project_quotas_read_the_global_gpu_quota(compute: GceCompute, cloud: LocalCloud) -> None:
    cloud.quota_limits["GPUS_ALL_REGIONS"] = 0.0
    sent_before = len(cloud.requests)

    quotas = compute.project_quotas()

    assert quotas["GPUS_ALL_REGIONS"] == Quota("GPUS_ALL_REGIONS", 0.0, 0.0)
    [sent] = cloud.requests[sent_before:]
    assert (sent.method, sent.path) == ("GET", "/compute/v1/projects/spotline-test")
    assert (sent.query, sent.body) == ({}, None)


def test_region_quotas_retry_a_503(compute: GceCompute, cloud: LocalCloud) -> None:
    cloud.quota_limits.clear()
    cloud.quota_limits["CPUS"] = 24.0
    cloud.fail_next("GET", "/regions/us-central1$", 503)

    assert compute.region_quotas("us-central1") == {"CPUS": Quota("CPUS", 24.0, 0.0)}
    assert len(cloud.requests_to("GET", "/regions/us-central1")) == 2


@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [
        (403, "forbidden", PermanentError),  # no compute.regions.get permission
        (404, "notFound", PermanentError),
        (503, "backendError", TransientError),  # still failing after the read retries
    ],
)
def test_region_quotas_errors(
    compute: GceCompute,
    cloud: LocalCloud,
    status: int,
    reason: str,
    error: type[Exception],
) -> None:
    cloud.fail_next("GET", "/regions/us-central1$", status, reason, times=1000)

    with pytest.raises(error, match="quotas of us-central1"):
        compute.region_quotas("us-central1")


@pytest.mark.parametrize(
    ("reason", "message", "kind"),
    [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", "", ErrorKind.CAPACITY),
        ("quotaExceeded", "Quota 'NVIDIA_T4_GPUS' exceeded.", ErrorKind.CAPACITY),
        ("rateLimitExceeded", "", ErrorKind.TRANSIENT),
        (
            "invalid",
            "Machine type with name 'a2-highgpu-1g' does not exist in zone",
            ErrorKind.CAPACITY,
        ),
        ("invalid", "Invalid value for field 'resource.name'", None),
        ("alreadyExists", "", None),
    ],
)
def test_classify_error(reason: str, message: str, kind: ErrorKind | None) -> None:
    assert gce_requests.classify_error(reason, message) is kind


def test_importing_the_adapter_does_not_import_the_client_library() -> None:
    code = (
        "import sys, spotline.shared.adapters.gce_compute; "
        "print('google.cloud.compute_v1' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == "False"


def test_a_read_refused_for_good_is_not_tried_again(compute: GceCompute, cloud: LocalCloud) -> None:
    add_instance(cloud, ZONE, "spotline-j-42-a1")
    cloud.fail_next("GET", "/instances/spotline-j-42-a1$", 403)

    with pytest.raises(SpotlineError, match="injected 403"):  # the port's, at once
        compute.get(ZONE, "spotline-j-42-a1")
    assert len(cloud.requests_to("GET", "/instances/spotline-j-42-a1")) == 1


def test_an_operation_poll_that_keeps_failing_to_read_ends_at_the_operation_deadline(
    cloud: LocalCloud,
) -> None:
    """The wait answers 503 for good: polled again (the operation carries on),
    and the insert is transient once the operation's time is up."""
    cloud.fail_next("POST", "/operations/[^/]+/wait$", 503, times=100_000)
    compute = GceCompute(cloud.project, api_endpoint=cloud.endpoint, operation_timeout_s=1.0)

    with pytest.raises(TransientError, match="not done after 1 s"):
        compute.insert(vm_request())
    assert len(cloud.requests_to("POST", "/wait")) > 1


def test_an_operation_poll_refused_for_good_is_not_polled_again(cloud: LocalCloud) -> None:
    cloud.fail_next("POST", "/operations/[^/]+/wait$", 403)
    compute = GceCompute(cloud.project, api_endpoint=cloud.endpoint, operation_timeout_s=30.0)

    with pytest.raises(SpotlineError, match="injected 403"):  # the port's, at once
        compute.insert(vm_request())
    assert len(cloud.requests_to("POST", "/wait")) == 1
