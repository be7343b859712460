"""Compute Engine's documented resource rules and real sequences, in the local
cloud: names, labels, metadata and ``requestId`` limits; a VM's teardown
states; operations that take time; aggregated lists in pages with per-zone
warnings."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.domain.vms import Provisioning
from tests.local_cloud import add_instance, client
from tests.unit.test_gce_compute import vm_request

ZONE = "us-central1-a"
ID = "3b1f6a2e-9c4d-4e8f-a1b2-c3d4e5f60718"


@pytest.fixture
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud("spotline-test", RecordLauncher()) as running:
        yield running


@pytest.fixture
def body(cloud: LocalCloud) -> dict[str, Any]:
    """An instance body as spotline's adapter sends it."""
    client(cloud).insert(vm_request(name="template"))
    [sent] = cloud.requests_to("POST", f"/zones/{ZONE}/instances")
    return dict(sent.body, name="by-hand")


def post(cloud: LocalCloud, path: str, body: Any, request_id: str | None = None) -> Any:
    url = f"{cloud.endpoint}/compute/v1/projects/{cloud.project}/{path}"
    params = {"requestId": request_id} if request_id else {}
    return requests.post(url, json=body, params=params, timeout=10)


def refused(answer: Any) -> str:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["errors"][0]["reason"] == "invalid"
    message: str = error["message"]
    return message


@pytest.mark.parametrize("name", ["a" * 64, "Upper", "9starts-with-a-digit", "ends-with-"])
def test_a_name_past_rfc1035_is_refused(cloud: LocalCloud, body: dict[str, Any], name: str) -> None:
    body["name"] = name
    message = refused(post(cloud, f"zones/{ZONE}/instances", body))
    assert message.startswith(f"Invalid value for field 'resource.name': '{name}'")


def test_a_63_character_name_is_taken(cloud: LocalCloud, body: dict[str, Any]) -> None:
    body["name"] = "a" * 63
    assert post(cloud, f"zones/{ZONE}/instances", body).status_code == 200


@pytest.mark.parametrize(
    ("labels", "words"),
    [
        ({"Job": "x"}, "Label key 'Job' violates format constraints"),
        ({"9job": "x"}, "Label key '9job' violates format constraints"),
        ({"k" * 64: "x"}, "violates format constraints"),
        ({"job": "X"}, "Label value 'X' violates format constraints"),
        ({"job": "v" * 64}, "violates format constraints"),
        ({f"k{i}": "" for i in range(65)}, "more than 64 labels"),
    ],
)
def test_labels_past_the_documented_limits_are_refused(
    cloud: LocalCloud, body: dict[str, Any], labels: dict[str, str], words: str
) -> None:
    body["labels"] = labels
    message = refused(post(cloud, f"zones/{ZONE}/instances", body))
    assert message.startswith("Invalid value for field 'resource.labels'") and words in message


def test_labels_at_the_limits_are_taken(cloud: LocalCloud, body: dict[str, Any]) -> None:
    body["labels"] = {"k" * 63: "v" * 63, "é-key_1": "", **{f"k{i}": "" for i in range(62)}}
    assert post(cloud, f"zones/{ZONE}/instances", body).status_code == 200


@pytest.mark.parametrize(
    ("items", "words"),
    [
        ([{"key": "a b", "value": "x"}], "'resource.metadata.items[].key': 'a b'"),
        ([{"key": "k" * 129, "value": "x"}], "'resource.metadata.items[].key'"),
        ([{"key": "big", "value": "x" * (256 * 1024 + 1)}], "the limit is 262144"),
        (
            [{"key": f"k{i}", "value": "x" * (200 * 1024)} for i in range(3)],
            "the limit is 524288 for all entries together",
        ),
        ([{"key": "k", "value": "1"}, {"key": "k", "value": "2"}], "Duplicate key 'k'"),
    ],
)
def test_metadata_past_the_documented_limits_is_refused(
    cloud: LocalCloud, body: dict[str, Any], items: list[dict[str, str]], words: str
) -> None:
    body["metadata"] = {"items": items}
    assert words in refused(post(cloud, f"zones/{ZONE}/instances", body))

    add_instance(cloud, ZONE, "running")
    fingerprint = cloud.instance(ZONE, "running")["metadata"]["fingerprint"]  # type: ignore[index]
    answer = post(
        cloud,
        f"zones/{ZONE}/instances/running/setMetadata",
        {"fingerprint": fingerprint, "items": items},
    )
    assert words in refused(answer)


def test_metadata_at_the_limits_is_taken(cloud: LocalCloud, body: dict[str, Any]) -> None:
    value = "x" * (256 * 1024 - 3)
    body["metadata"] = {"items": [{"key": "k" * 3, "value": value}, {"key": "a", "value": "b"}]}
    assert post(cloud, f"zones/{ZONE}/instances", body).status_code == 200


@pytest.mark.parametrize(
    "request_id",
    ["retry-1", "00000000-0000-0000-0000-000000000000", "3b1f6a2e9c4d4e8fa1b2c3d4e5f60718"],
)
def test_a_request_id_that_is_no_uuid_is_refused(
    cloud: LocalCloud, body: dict[str, Any], request_id: str
) -> None:
    message = refused(post(cloud, f"zones/{ZONE}/instances", body, request_id))
    assert message.startswith(f"Invalid value for field 'requestId': '{request_id}'")
    assert cloud.get("by-hand") is None


def test_a_request_id_answers_the_same_operation_on_every_mutating_call(
    cloud: LocalCloud, body: dict[str, Any]
) -> None:
    first = post(cloud, f"zones/{ZONE}/instances", body, ID).json()
    body["name"] = "another"
    again = post(cloud, f"zones/{ZONE}/instances", body, ID).json()
    stop_id = "4c2a7b3f-0d5e-4f9a-b2c3-d4e5f6071829"
    stopped = post(cloud, f"zones/{ZONE}/instances/by-hand/stop", None, stop_id).json()
    cloud.model.start("by-hand", ZONE)
    stopped_again = post(cloud, f"zones/{ZONE}/instances/by-hand/stop", None, stop_id).json()

    assert again["name"] == first["name"] and cloud.get("another") is None
    assert stopped_again["name"] == stopped["name"]
    assert cloud.instance(ZONE, "by-hand")["status"] == "RUNNING"  # type: ignore[index]


def test_a_request_id_is_forgotten_after_its_window(
    cloud: LocalCloud, body: dict[str, Any]
) -> None:
    cloud.operations.request_id_window_s = 0.2
    first = post(cloud, f"zones/{ZONE}/instances", body, ID).json()
    time.sleep(0.3)
    body["name"] = "another"
    later = post(cloud, f"zones/{ZONE}/instances", body, ID).json()

    assert later["name"] != first["name"] and cloud.get("another") is not None


# -- sequences ---------------------------------------------------------------------


def watch(cloud: LocalCloud, name: str) -> tuple[list[str], threading.Event]:
    """The VM's statuses as they change, read every 10 ms until it is gone."""
    seen: list[str] = []
    gone = threading.Event()

    def run() -> None:
        while True:
            vm = cloud.instance(ZONE, name)
            status = "gone" if vm is None else vm["status"]
            if not seen or seen[-1] != status:
                seen.append(status)
            if vm is None:
                gone.set()
                return
            time.sleep(0.01)

    threading.Thread(target=run, daemon=True).start()
    return seen, gone


def test_a_preempted_spot_vm_is_torn_down_in_compute_engines_order() -> None:
    with LocalCloud("spotline-test", RecordLauncher(), teardown_s=0.3) as cloud:
        add_instance(cloud, ZONE, "spot")
        seen, gone = watch(cloud, "spot")
        time.sleep(0.05)

        cloud.preempt("spot", notice_s=5.0, zone=ZONE)
        assert gone.wait(5)

    # A record ends at SIGTERM: STOPPING lasts no time here.
    assert [s for s in seen if s != "STOPPING"] == [
        "RUNNING",
        "TERMINATED",
        "DEPROVISIONING",
        "gone",
    ]


def test_a_delete_waits_for_the_vm_to_be_gone(cloud: LocalCloud) -> None:
    cloud.model.teardown_s = 0.4
    compute: GceCompute = client(cloud)
    compute.insert(vm_request(name="doomed", provisioning=Provisioning.SPOT))
    seen, gone = watch(cloud, "doomed")
    time.sleep(0.05)

    began = time.monotonic()
    compute.delete(ZONE, "doomed")

    assert time.monotonic() - began >= 0.4
    assert cloud.get("doomed") is None
    # The watcher reads every 10 ms: it may see the VM gone just after the delete returns.
    assert gone.wait(5)
    assert [s for s in seen if s != "STOPPING"] == ["RUNNING", "DEPROVISIONING", "gone"]


def test_a_stop_ends_terminated(compute: GceCompute, cloud: LocalCloud) -> None:
    compute.insert(vm_request(name="paused"))
    assert compute.stop(ZONE, "paused")
    assert cloud.instance(ZONE, "paused")["status"] == "TERMINATED"  # type: ignore[index]


def test_operations_take_their_delay(cloud: LocalCloud, body: dict[str, Any]) -> None:
    cloud.operations.delay_s = 0.5
    answer = post(cloud, f"zones/{ZONE}/instances", body).json()
    assert answer["status"] == "RUNNING"

    began = time.monotonic()
    client(cloud).insert(vm_request(name="slow", request_id=ID))

    assert time.monotonic() - began >= 0.5


def test_an_aggregated_list_pages_and_warns_of_empty_zones(cloud: LocalCloud) -> None:
    for zone, name in [("us-central1-a", "a1"), ("us-central1-a", "a2"), ("us-east1-b", "b1")]:
        add_instance(cloud, zone, name)
    url = f"{cloud.endpoint}/compute/v1/projects/{cloud.project}/aggregated/instances"

    first = requests.get(url, params={"maxResults": "2"}, timeout=10).json()
    token = first["nextPageToken"]
    second = requests.get(url, params={"maxResults": "2", "pageToken": token}, timeout=10).json()

    assert [vm["name"] for vm in first["items"]["zones/us-central1-a"]["instances"]] == ["a1", "a2"]
    empty = first["items"]["zones/us-east1-b"]["warning"]
    assert empty == {
        "code": "NO_RESULTS_ON_PAGE",
        "message": "There are no results for scope 'zones/us-east1-b' on this page.",
        "data": [{"key": "scope", "value": "zones/us-east1-b"}],
    }
    assert [vm["name"] for vm in second["items"]["zones/us-east1-b"]["instances"]] == ["b1"]
    assert "warning" in second["items"]["zones/us-central1-a"]
    assert "nextPageToken" not in second


def test_the_adapter_reads_every_page(cloud: LocalCloud) -> None:
    for zone, name in [("us-central1-a", "a1"), ("us-central1-b", "b1"), ("us-east1-b", "e1")]:
        add_instance(cloud, zone, name, labels={"spotline": "true"})
    cloud.api.list_page_size = 1

    listed = client(cloud).list({"spotline": "true"})

    assert sorted(vm.name for vm in listed) == ["a1", "b1", "e1"]
    assert len(cloud.requests_to("GET", "/aggregated/instances")) == 3


def test_a_bad_page_token_is_refused(cloud: LocalCloud) -> None:
    url = f"{cloud.endpoint}/compute/v1/projects/{cloud.project}/aggregated/instances"
    answer = requests.get(url, params={"pageToken": "nonsense"}, timeout=10)
    assert refused(answer).startswith("Invalid value for field 'pageToken'")
