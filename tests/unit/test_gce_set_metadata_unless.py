"""``GceCompute.set_metadata``'s ``unless``: asked of the VM's items as read,
under the fingerprint the write carries; True leaves them as they are (a
regroup never written over a newer one)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.domain.errors import TransientError
from spotline.shared.domain.vms import REGROUP_METADATA_KEY
from tests.local_cloud import add_instance

ZONE = "us-central1-a"
NAME = "spotline-j-42-a1"


def items_of(cloud: LocalCloud) -> dict[str, str]:
    vm = cloud.instance(ZONE, NAME) or {}
    return {item["key"]: item["value"] for item in vm["metadata"]["items"]}


def test_unless_true_of_the_items_read_leaves_them_unwritten(
    compute: GceCompute, cloud: LocalCloud
) -> None:
    add_instance(cloud, ZONE, NAME, metadata={REGROUP_METADATA_KEY: "3"})
    seen: list[dict[str, str]] = []

    def newer_than(generation: int) -> Callable[[dict[str, str]], bool]:
        def newer(items: dict[str, str]) -> bool:
            seen.append(items)
            return int(items.get(REGROUP_METADATA_KEY, "0")) > generation

        return newer

    compute.set_metadata(ZONE, NAME, {REGROUP_METADATA_KEY: "2"}, unless=newer_than(2))
    assert seen == [{REGROUP_METADATA_KEY: "3"}]
    assert cloud.requests_to("POST", f"/instances/{NAME}/setMetadata") == []
    assert items_of(cloud) == {REGROUP_METADATA_KEY: "3"}
    change = {REGROUP_METADATA_KEY: "4", "other": "x"}
    compute.set_metadata(ZONE, NAME, change, unless=newer_than(4))
    assert items_of(cloud) == {REGROUP_METADATA_KEY: "4", "other": "x"}


def test_a_change_between_the_read_and_the_write_is_transient(
    compute: GceCompute, cloud: LocalCloud
) -> None:
    """Another writer's change after ``unless`` read the items: the write's
    fingerprint is stale, refused; the retry reads the new items."""
    add_instance(cloud, ZONE, NAME, metadata={REGROUP_METADATA_KEY: "1"})

    def meanwhile(items: dict[str, str]) -> bool:
        compute.set_metadata(ZONE, NAME, {REGROUP_METADATA_KEY: "3"})
        return False

    with pytest.raises(TransientError):
        compute.set_metadata(ZONE, NAME, {REGROUP_METADATA_KEY: "2"}, unless=meanwhile)
    assert items_of(cloud) == {REGROUP_METADATA_KEY: "3"}
