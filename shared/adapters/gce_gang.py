"""Pure translation between a ``GangRequest`` and one ``regionInstances.bulkInsert``.

``bulk_insert_request`` builds the call ``GceCompute.insert_gang`` sends, and
``gang_vms`` picks the gang's VMs, in node order, out of a listing.

A bulk insert describes every VM with one ``instanceProperties`` and names them
in ``perInstanceProperties``, which holds nothing but a name and a hostname: the
nodes must agree on everything else, and a label that differs between nodes
(such as a rank) cannot be sent.

``google.cloud.compute_v1`` is imported when first needed, as in ``gce_requests``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from spotline.shared.adapters import gce_requests
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.vms import GangRequest, Vm, VmRequest, VmState

if TYPE_CHECKING:
    from google.cloud import compute_v1

# Compute Engine puts every VM of the request in one of the allowed zones.
TARGET_SHAPE = "ANY_SINGLE_ZONE"


def shared_labels(nodes: Iterable[VmRequest]) -> dict[str, str]:
    """The labels every node carries with the same value."""
    items = [set(node.labels.items()) for node in nodes]
    return dict(set.intersection(*items)) if items else {}


def check_gang(gang: GangRequest) -> None:
    """Raise ``PermanentError`` unless one bulk insert can create ``gang``."""
    if not gang.nodes or not gang.zones:
        raise PermanentError(f"gang {gang.request_id}: needs nodes and zones")
    names = [node.name for node in gang.nodes]
    if len(set(names)) != len(names):
        raise PermanentError(f"gang {gang.request_id}: node names repeat: {names}")
    foreign = [zone for zone in gang.zones if not zone.startswith(f"{gang.region}-")]
    if foreign:
        raise PermanentError(f"gang {gang.request_id}: zones {foreign} not in {gang.region}")
    if any(_shape(node) != _shape(gang.nodes[0]) for node in gang.nodes[1:]):
        raise PermanentError(
            f"gang {gang.request_id}: nodes differ in more than name and labels, "
            "which one bulk insert cannot express"
        )


def _shape(node: VmRequest) -> VmRequest:
    """``node`` without what may differ between the nodes of a gang."""
    return dataclasses.replace(node, name="", zone="", labels={}, request_id="")


def instance_properties(request: VmRequest) -> compute_v1.InstanceProperties:
    """What every VM of a bulk insert is made of, from one node's ``request``.

    Unlike ``instances.insert``, these properties take the short names of the
    machine and accelerator types: the zone is not known until Compute Engine
    picks it.
    """
    from google.cloud import compute_v1

    accelerators = [
        compute_v1.AcceleratorConfig(
            accelerator_type=accelerator.type, accelerator_count=accelerator.count
        )
        for accelerator in request.accelerators
    ]
    return compute_v1.InstanceProperties(
        machine_type=request.machine_type,
        disks=[gce_requests.boot_disk(request)],
        network_interfaces=gce_requests.network_interfaces(),
        labels=dict(request.labels),
        metadata=compute_v1.Metadata(items=gce_requests.metadata_items(request.metadata)),
        guest_accelerators=accelerators,
        service_accounts=gce_requests.service_accounts(request),
        scheduling=gce_requests.scheduling(request),
        tags=gce_requests.tags(request),
    )


def location_policy(zones: Iterable[str]) -> compute_v1.LocationPolicy:
    """One zone for all the VMs, chosen among ``zones`` only."""
    from google.cloud import compute_v1

    return compute_v1.LocationPolicy(
        target_shape=TARGET_SHAPE,
        locations={
            f"zones/{zone}": compute_v1.LocationPolicyLocation(preference="ALLOW") for zone in zones
        },
    )


def bulk_insert_request(
    project: str, gang: GangRequest
) -> compute_v1.BulkInsertRegionInstanceRequest:
    """``regionInstances.bulkInsert`` of every node of ``gang``, all or none.

    ``minCount = count``: Compute Engine creates all the nodes or deletes the
    ones it made. It dedupes a retried call by ``gang.request_id``. Each VM gets
    the labels all the nodes share.

    Raises:
        PermanentError: the gang cannot be one bulk insert (see ``check_gang``).
    """
    from google.cloud import compute_v1

    check_gang(gang)
    first = dataclasses.replace(gang.nodes[0], labels=shared_labels(gang.nodes))
    count = len(gang.nodes)
    names = {
        node.name: compute_v1.BulkInsertInstanceResourcePerInstanceProperties()
        for node in gang.nodes
    }
    return compute_v1.BulkInsertRegionInstanceRequest(
        project=project,
        region=gang.region,
        request_id=gang.request_id,
        bulk_insert_instance_resource_resource=compute_v1.BulkInsertInstanceResource(
            count=count,
            min_count=count,
            per_instance_properties=names,
            instance_properties=instance_properties(first),
            location_policy=location_policy(gang.zones),
        ),
    )


def gang_vms(gang: GangRequest, found: Iterable[Vm]) -> list[Vm] | None:
    """The gang's VMs in ``gang.nodes`` order, picked out of ``found``.

    A node missing next to found ones was preempted, and so deleted, before it
    was read back: it comes back ``TERMINATED`` in the gang's zone.

    Returns:
        The VMs, or ``None`` when none of the nodes is in ``found``.

    Raises:
        PermanentError: the nodes' names are taken in more than one zone.
    """
    names = {node.name for node in gang.nodes}
    matches = [vm for vm in found if vm.name in names]
    zones = sorted({vm.zone for vm in matches})
    if not zones:
        return None
    if len(zones) > 1:
        raise PermanentError(f"gang {gang.request_id}: its VM names are taken in zones {zones}")
    by_name: Mapping[str, Vm] = {vm.name: vm for vm in matches}
    return [by_name.get(node.name) or _deleted(node, zones[0]) for node in gang.nodes]


def _deleted(node: VmRequest, zone: str) -> Vm:
    return Vm(
        name=node.name,
        zone=zone,
        state=VmState.TERMINATED,
        labels=dict(node.labels),
        machine_type=node.machine_type,
    )
