"""Requests held to Google's published API definitions (the discovery documents
``google-api-python-client`` ships): the local Compute Engine and the deploy
doubles refuse what Google's front end refuses, with its error body, and a
refusal the caller swallowed still fails the test that sent it."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from google.api_core.exceptions import BadRequest

from spotline.infra.deploy.clients import ProjectClients
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.discovery import Violation
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.shared.adapters.gce_compute import GceCompute
from tests.cloud_double import CloudDouble
from tests.local_cloud import client
from tests.unit.test_gce_compute import vm_request
from tests.wire_contract import broken_contract

ZONE = "us-central1-a"
Violations = Callable[[], list[Violation]]


@pytest.fixture
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud("spotline-test", RecordLauncher()) as running:
        yield running


@pytest.fixture
def sent_body(cloud: LocalCloud) -> dict[str, Any]:
    """The instance body spotline's adapter sends, as the wire carried it."""
    compute: GceCompute = client(cloud)
    compute.insert(vm_request(name="template"))
    [sent] = cloud.requests_to("POST", f"/zones/{ZONE}/instances")
    body: dict[str, Any] = copy.deepcopy(sent.body)
    body["name"] = "by-hand"
    return body


def insert(cloud: LocalCloud, body: Any, **query: str) -> requests.Response:
    url = f"{cloud.endpoint}/compute/v1/projects/{cloud.project}/zones/{ZONE}/instances"
    return requests.post(url, json=body, params=query, timeout=10)


def refusal(answer: requests.Response) -> str:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    [entry] = error["errors"]
    assert entry == {"message": error["message"], "domain": "global", "reason": "invalid"}
    message: str = error["message"]
    return message


def test_a_misspelled_field_is_refused_as_compute_engine_refuses_it(
    cloud: LocalCloud, sent_body: dict[str, Any], wire_violations: Violations
) -> None:
    sent_body["schedulng"] = sent_body.pop("scheduling")

    message = refusal(insert(cloud, sent_body))

    assert message == (
        "Invalid JSON payload received. Unknown name \"schedulng\" at 'instance': "
        "Cannot find field."
    )
    assert cloud.get("by-hand") is None
    [violation] = wire_violations()
    assert (violation.api, violation.method, violation.message) == ("compute", "POST", message)


def test_a_misspelled_nested_field_names_where_it_is(
    cloud: LocalCloud, sent_body: dict[str, Any], wire_violations: Violations
) -> None:
    sent_body["disks"][0]["initializeParams"]["diskSizeGB"] = "150"

    message = refusal(insert(cloud, sent_body))

    assert message == (
        'Invalid JSON payload received. Unknown name "diskSizeGB" at '
        "'instance.disks[0].initializeParams': Cannot find field."
    )


def test_a_bad_enum_value_is_refused(
    cloud: LocalCloud, sent_body: dict[str, Any], wire_violations: Violations
) -> None:
    sent_body["scheduling"]["onHostMaintenance"] = "X"

    message = refusal(insert(cloud, sent_body))

    assert message.startswith(
        "Invalid value for field 'resource.scheduling.onHostMaintenance': 'X'."
    )
    assert "MIGRATE" in message and "TERMINATE" in message


@pytest.mark.parametrize(
    ("where", "value", "kind"),
    [
        (("scheduling", "automaticRestart"), "no", "TYPE_BOOL"),
        (("disks", 0, "initializeParams", "diskSizeGb"), "a lot", "TYPE_INT64"),
        (("guestAccelerators", 0, "acceleratorCount"), 1.5, "TYPE_INT32"),
        (("labels", "job"), 42, "TYPE_STRING"),  # additionalProperties: string
        (("guestAccelerators",), {"acceleratorCount": 1}, "TYPE_LIST"),
        (("metadata",), "job=1", "TYPE_MESSAGE"),
    ],
)
def test_a_wrong_type_is_refused(
    cloud: LocalCloud,
    sent_body: dict[str, Any],
    wire_violations: Violations,
    where: tuple[Any, ...],
    value: Any,
    kind: str,
) -> None:
    *parents, last = where
    holder: Any = sent_body
    for key in parents:
        holder = holder[key]
    holder[last] = value

    message = refusal(insert(cloud, sent_body))

    assert message.startswith("Invalid value at 'instance.") and f"({kind})" in message


def test_int64_travels_as_a_string_or_a_number(
    cloud: LocalCloud, sent_body: dict[str, Any]
) -> None:
    sent_body["disks"][0]["initializeParams"]["diskSizeGb"] = 150
    assert insert(cloud, sent_body).status_code == 200
    sent_body["name"] = "by-hand-2"
    sent_body["disks"][0]["initializeParams"]["diskSizeGb"] = "150"
    assert insert(cloud, sent_body).status_code == 200


def test_an_unknown_query_parameter_is_refused(
    cloud: LocalCloud, sent_body: dict[str, Any], wire_violations: Violations
) -> None:
    message = refusal(insert(cloud, sent_body, requestID="2f6c1d0e-5b7a-4c8e-9d3f-0a1b2c3d4e5f"))

    assert 'Unknown name "requestID"' in message


def test_a_wrong_query_type_is_refused(cloud: LocalCloud, wire_violations: Violations) -> None:
    url = f"{cloud.endpoint}/compute/v1/projects/{cloud.project}/aggregated/instances"

    answer = requests.get(url, params={"maxResults": "many"}, timeout=10)

    assert "(TYPE_INT32)" in refusal(answer)


def test_a_path_no_method_serves_is_not_found(
    cloud: LocalCloud, wire_violations: Violations
) -> None:
    url = f"{cloud.endpoint}/compute/v1/projects/{cloud.project}/zones/{ZONE}/instance"

    answer = requests.get(url, timeout=10)

    assert answer.status_code == 404
    assert "No method of compute.v1 serves GET" in answer.json()["error"]["message"]
    assert [v.path for v in wire_violations()] == [url.removeprefix(cloud.endpoint)]


@pytest.mark.parametrize("path", ["/", "/favicon.ico", "/healthz"])
def test_a_request_outside_every_api_is_not_found_and_no_violation(
    cloud: LocalCloud, path: str
) -> None:
    """A stray probe of the port (another server's readiness check on a reused
    port, a browser) is not a request of spotline's: Google's front end
    answers 404, and the test that owns the server does not fail for it."""
    answer = requests.get(cloud.endpoint + path, timeout=10)

    assert answer.status_code == 404


def test_a_misspelled_field_spotline_sends_fails_the_test(wire_violations: Violations) -> None:
    """spotline's own IAM call with a misspelled body: refused by the double
    and, though swallowed here, reported as a broken contract."""
    with CloudDouble("acme-ml", "us-central1") as double:
        clients = ProjectClients("acme-ml", double.endpoints())
        body = {"accountId": "spotline-fn", "serviceAcount": {"displayName": "fn"}}
        with pytest.raises(BadRequest) as refused:
            clients.iam_call("POST", "projects/acme-ml/serviceAccounts", body)

    assert "Unknown name \"serviceAcount\" at 'createServiceAccountRequest'" in str(refused.value)
    failure = broken_contract(wire_violations())
    assert failure is not None and "serviceAcount" in failure and "iam" in failure


def test_a_body_the_method_takes_none_of_is_refused(wire_violations: Violations) -> None:
    """IAM's serviceAccounts.getIamPolicy has no request body in its definition."""
    with CloudDouble("acme-ml", "us-central1") as double:
        clients = ProjectClients("acme-ml", double.endpoints())
        resource = "projects/acme-ml/serviceAccounts/fn@acme-ml.iam.gserviceaccount.com"
        with pytest.raises(BadRequest) as refused:
            clients.iam_call(
                "POST", f"{resource}:getIamPolicy", {"options": {"requestedPolicyVersion": 3}}
            )

    assert 'Unknown name "options"' in str(refused.value)


def test_no_violation_no_failure() -> None:
    assert broken_contract([]) is None


def test_without_google_api_python_client_nothing_is_checked() -> None:
    """A user's install without the dev extras: the local cloud still serves,
    checks nothing, and says so once."""
    script = """
import importlib.abc, logging, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "googleapiclient":
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, Absent())
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from spotline.infra.localcloud.discovery import Contract
contract = Contract([("compute", "v1")])
path = "/compute/v1/projects/p/zones/z/instances"
for _ in range(2):
    assert contract.record("POST", path, {}, {"x": 1}, True) is None
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    [warning] = done.stderr.strip().splitlines()
    assert "not checked against Google's definitions" in warning
    assert "pip install google-api-python-client" in warning


def test_a_missing_required_parameter_is_refused(wire_violations: Violations) -> None:
    """Cloud Storage's buckets.insert requires the ``project`` query parameter."""
    with CloudDouble("acme-ml", "us-central1") as double:
        answer = requests.post(
            f"{double.endpoint}/storage/v1/b", json={"name": "acme-bucket"}, timeout=10
        )

    assert refusal(answer) == "Required parameter 'project' is missing."
    [violation] = wire_violations()
    assert violation.api == "storage"
