"""Every instance status Compute Engine documents, and one it may add later,
read back by ``GceCompute`` without an error: a VM being torn down must not
crash the reaper's listing or a placement's read-back."""

from __future__ import annotations

import logging

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters import gce_requests
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.domain import reaping
from spotline.shared.domain.vms import VmState
from tests.discovery import enum
from tests.documents import T0, vm
from tests.local_cloud import add_instance, client
from tests.unit.test_gce_compute import vm_request

ZONE = "us-central1-a"
DOCUMENTED = enum("compute", "Instance", "status")


@pytest.mark.parametrize("status", DOCUMENTED)
def test_every_documented_status_is_a_vm_state(status: str) -> None:
    assert gce_requests.vm_state(status) == VmState(status)


def test_an_unknown_status_is_an_existing_vm_of_unknown_state_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        states = [gce_requests.vm_state("HIBERNATING") for _ in range(3)]

    assert states == [VmState.UNKNOWN] * 3
    assert [r.getMessage() for r in caplog.records if "HIBERNATING" in r.getMessage()] == [
        "Compute Engine answered an instance status spotline does not know, "
        "'HIBERNATING': such a VM is taken to exist, not running"
    ]


@pytest.mark.parametrize("status", ["DEPROVISIONING", "PENDING", "SUSPENDING", "FUTURE_STATE"])
def test_get_and_list_read_a_vm_in_any_status(
    compute: GceCompute, cloud: LocalCloud, status: str
) -> None:
    add_instance(cloud, ZONE, "sl-j1-a1", labels={"spotline-job": "j1"})
    cloud.show_status(ZONE, "sl-j1-a1", status)

    got = compute.get(ZONE, "sl-j1-a1")
    [listed] = compute.list({"spotline-job": "j1"})

    assert got is not None and got.state == listed.state
    assert got.state == (VmState.UNKNOWN if status == "FUTURE_STATE" else VmState(status))


@pytest.mark.parametrize("state", sorted(VmState.going()))
def test_a_vm_already_going_is_no_orphan(state: VmState) -> None:
    going = vm("sl-ghost-a1", state, {"spotline-job": "ghost", "spotline-attempt": "1"})
    assert not reaping.orphaned(going, None, None, T0)


def test_a_vm_of_unknown_state_that_nothing_owns_is_an_orphan() -> None:
    odd = vm("sl-ghost-a1", VmState.UNKNOWN, {"spotline-job": "ghost", "spotline-attempt": "1"})
    assert reaping.orphaned(odd, None, None, T0)


def test_an_unknown_operation_status_that_ends_done_is_done(cloud: LocalCloud) -> None:
    cloud.operations.unfinished_status = "QUEUED_FOR_LATER"
    cloud.operation_polls = 2

    vm = client(cloud).insert(vm_request(name="soon"))

    assert vm.name == "soon"


def test_an_unknown_quota_metric_is_read_as_it_is(cloud: LocalCloud) -> None:
    """A quota metric Compute Engine adds later is listed under its own name;
    placement, which asks for the metrics it knows, is not affected."""
    cloud.quota_limits["FUTURE_ACCELERATOR_GPUS"] = 4.0

    quotas = client(cloud).region_quotas("us-central1")

    assert quotas["FUTURE_ACCELERATOR_GPUS"].limit == 4.0
    assert quotas["CPUS"].limit > 0
