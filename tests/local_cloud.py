"""The real google-cloud-compute client against the local cloud, whose VMs are
records (no process): fixtures ``cloud`` and ``compute``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.domain.errors import CapacityError, TransientError


@pytest.fixture
def cloud() -> Iterator[LocalCloud]:
    with LocalCloud("spotline-test", RecordLauncher()) as running:
        yield running


def client(cloud: LocalCloud, operation_timeout_s: float = 5.0) -> GceCompute:
    """GceCompute on the local cloud; anonymous credentials, as on any loopback endpoint."""
    return GceCompute(
        cloud.project,
        api_endpoint=cloud.endpoint,
        operation_timeout_s=operation_timeout_s,
        read_retry_s=1.0,
    )


@pytest.fixture
def compute(cloud: LocalCloud) -> GceCompute:
    return client(cloud)


def add_instance(
    cloud: LocalCloud,
    zone: str,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    metadata: dict[str, str] | None = None,
    status: str = "RUNNING",
    machine_type: str = "n1-standard-4",
) -> dict[str, Any]:
    """Put a VM in place, as if another caller had made it; its Compute Engine JSON."""
    fields = {"name": name, "zone": zone, "machine_type": machine_type}
    cloud.insert({**fields, "labels": labels or {}, "metadata": metadata or {}})
    if status == "TERMINATED":
        cloud.stop(name, zone)
    instance = cloud.instance(zone, name)
    assert instance is not None and instance["status"] == status
    return instance


def vm_keys(cloud: LocalCloud) -> list[tuple[str, str]]:
    """(zone, name) of every VM, sorted."""
    return sorted((vm["zone"], vm["name"]) for vm in cloud.list())


# How an insert of one VM and a gang's bulk insert end when Compute Engine
# refuses them or never finishes: the same for both.


def assert_refused_as(error: type[Exception], insert: Callable[[], object]) -> None:
    """``insert`` raises ``error``, and not as a capacity error (which would
    send the job on to its next zone)."""
    with pytest.raises(error) as raised:
        insert()

    assert not isinstance(raised.value, CapacityError)


def assert_an_endless_operation_is_transient(
    cloud: LocalCloud, insert: Callable[[GceCompute], object]
) -> None:
    """An operation that is never done: ``insert`` on a client that waits 0.3 s
    for it is transient, to be retried."""
    cloud.operation_polls = 10**9

    # Under load the last, short wait may time out in the HTTP client rather
    # than in the adapter's loop: either way the insert is transient.
    with pytest.raises(TransientError, match=r"not done|timed out"):
        insert(client(cloud, operation_timeout_s=0.3))
