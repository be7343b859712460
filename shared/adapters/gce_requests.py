"""Pure translation between spotline's compute port and Compute Engine's types.

Nothing here talks to the network: ``instance_resource`` builds the typed
``compute_v1.Instance`` that ``GceCompute.insert`` sends, ``vm_from_instance``
reads one back (``quotas_from_region`` a region's quotas), and
``classify_error`` sorts Compute Engine's error reasons into the port's three
outcomes. ``gce_gang`` builds a gang's bulk insert from the
same pieces.

``google.cloud.compute_v1`` takes over 2 s to import and every Cloud Functions
cold start would pay it, so the builders import it when first called.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from spotline.shared.domain import tenancy
from spotline.shared.domain.catalog import built_in_gpus
from spotline.shared.domain.vms import Provisioning, Quota, Vm, VmRequest, VmState

if TYPE_CHECKING:
    from google.cloud import compute_v1

log = logging.getLogger(__name__)
# The unknown instance statuses logged already (one line each per process).
_UNKNOWN_STATUSES: set[str] = set()

# The VMs' OAuth scopes, narrowed to what the agent does: publish events, read and
# write checkpoints, write logs; and the Ops Agent's metrics, which Cloud
# Monitoring refuses without monitoring.write. Scopes bound what the VM
# account's roles allow.
VM_SCOPES = (
    "https://www.googleapis.com/auth/pubsub",
    "https://www.googleapis.com/auth/devstorage.read_write",
    "https://www.googleapis.com/auth/logging.write",
    "https://www.googleapis.com/auth/monitoring.write",
)
# Only for a job with Secret Manager references, which has no scope of its own:
# the VM account's IAM roles (secretAccessor on the named secrets, granted by
# the user) still bound what the token can do.
SECRETS_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# The network ``spotline deploy`` makes, whose firewall lets a VM be reached by
# VMs of its own user only (``spotline.infra.deploy.network``).
NETWORK = f"global/networks/{tenancy.NETWORK}"


class ErrorKind(StrEnum):
    """What an error reason from Compute Engine means for the caller."""

    CAPACITY = "CAPACITY"  # no room or quota for this machine here: try the next option
    TRANSIENT = "TRANSIENT"  # the same call may pass later
    PERMANENT = "PERMANENT"  # the request itself is wrong


# Reasons (HTTP errors) and codes (operation errors) share one namespace: the
# HTTP form uses camelCase reasons, the operation form UPPER_CASE codes.
_KIND_BY_REASON: dict[str, ErrorKind] = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": ErrorKind.CAPACITY,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": ErrorKind.CAPACITY,
    "QUOTA_EXCEEDED": ErrorKind.CAPACITY,
    # bulkInsert checks capacity up front and refuses with 503 insufficientCapacity.
    "insufficientCapacity": ErrorKind.CAPACITY,
    "quotaExceeded": ErrorKind.CAPACITY,
    "rateLimitExceeded": ErrorKind.TRANSIENT,  # API rate limit, not machine quota
    "RESOURCE_OPERATION_RATE_EXCEEDED": ErrorKind.TRANSIENT,
    "resourceNotReady": ErrorKind.TRANSIENT,  # e.g. deleting a VM that is still stopping
    "conditionNotMet": ErrorKind.TRANSIENT,  # stale metadata fingerprint: re-read and retry
    "backendError": ErrorKind.TRANSIENT,
    "internalError": ErrorKind.TRANSIENT,
    "INTERNAL_ERROR": ErrorKind.TRANSIENT,
}

# Compute Engine reports "this zone does not offer that GPU or machine type" as
# a generic invalid-value error; only the message tells it apart, and another
# zone may well offer it.
_NOT_IN_ZONE = re.compile(
    r"(accelerator ?type|machine ?type).*"
    r"(does not exist|not found|not supported|not available|unsupported)",
    re.IGNORECASE,
)
_NOT_IN_ZONE_REASONS = frozenset(
    {"invalid", "notFound", "UNSUPPORTED_OPERATION", "RESOURCE_NOT_FOUND"}
)


def classify_error(reason: str, message: str = "") -> ErrorKind | None:
    """Sort one Compute Engine error reason (or operation error code).

    Args:
        reason: ``error.errors[].reason`` of an HTTP error, or
            ``error.errors[].code`` of a finished operation.
        message: the error's message; needed for the not-in-this-zone case.

    Returns:
        The kind, or ``None`` when the reason alone does not say (the caller
        then falls back on the HTTP status code).
    """
    if reason in _NOT_IN_ZONE_REASONS and _NOT_IN_ZONE.search(message):
        return ErrorKind.CAPACITY
    return _KIND_BY_REASON.get(reason)


# Compute Engine's words for a quota an insert would pass, e.g. "Quota
# 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally." or "... Limit: 0.0 in
# region us-central1."
_QUOTA_EXCEEDED = re.compile(
    r"Quota '(?P<metric>[A-Z0-9_]+)' exceeded\.\s+Limit: (?P<limit>[0-9.]+)"
    r" (?:globally|in region (?P<region>[a-z0-9-]+))"
)


def zero_quota(message: str, project: str) -> str | None:
    """For a quota error on a quota whose limit is 0, which no VM's end can
    ever free, the error and how to ask for an increase; None for any other.

    Args:
        message: the error's message, as Compute Engine words it.
        project: the project, for the commands in the advice.
    """
    found = _QUOTA_EXCEEDED.search(message)
    if found is None or float(found["limit"]) != 0:
        return None
    metric, region = found["metric"], found["region"]
    shows = (
        f"`gcloud compute regions describe {region} --project {project}`"
        if region
        else f"`gcloud compute project-info describe --project {project}`"
    )
    return (
        f"{found[0]}. A limit of 0 is never freed by waiting: request an increase of "
        f"{metric} on the Cloud console's quotas page "
        f"(https://console.cloud.google.com/iam-admin/quotas?project={project}); "
        f"{shows} lists the limits."
    )


def kind_for_status(status_code: int) -> ErrorKind:
    """The kind of an HTTP error whose reasons said nothing."""
    if status_code == 429 or status_code >= 500:
        return ErrorKind.TRANSIENT
    return ErrorKind.PERMANENT


def machine_type_url(zone: str, machine_type: str) -> str:
    return f"zones/{zone}/machineTypes/{machine_type}"


def accelerator_type_url(zone: str, accelerator_type: str) -> str:
    return f"zones/{zone}/acceleratorTypes/{accelerator_type}"


def metadata_items(items: Mapping[str, str]) -> list[compute_v1.Items]:
    from google.cloud import compute_v1

    return [compute_v1.Items(key=key, value=value) for key, value in items.items()]


def scheduling(request: VmRequest) -> compute_v1.Scheduling:
    """Spot VMs are deleted on preemption; GPU VMs never live-migrate."""
    from google.cloud import compute_v1

    # The API's enum-valued fields are strings on the wire and in compute_v1.
    if request.provisioning is Provisioning.SPOT:
        return compute_v1.Scheduling(
            provisioning_model="SPOT",
            instance_termination_action="DELETE",
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
        )
    # Compute Engine refuses MIGRATE for a VM with GPUs, attached or built into
    # its machine type (G2, A2, A3: no guestAccelerators on the request).
    gpus = bool(request.accelerators) or built_in_gpus(request.machine_type) > 0
    return compute_v1.Scheduling(
        provisioning_model="STANDARD",
        automatic_restart=True,
        on_host_maintenance="TERMINATE" if gpus else "MIGRATE",
    )


def boot_disk(request: VmRequest) -> compute_v1.AttachedDisk:
    """A boot disk made from ``request.image``, deleted with its VM."""
    from google.cloud import compute_v1

    return compute_v1.AttachedDisk(
        boot=True,
        auto_delete=True,
        initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image=request.image,
            disk_size_gb=request.disk_gb,
        ),
    )


def network_interfaces() -> list[compute_v1.NetworkInterface]:
    """spotline's network, with an external IP to reach the buckets and the API."""
    from google.cloud import compute_v1

    return [
        compute_v1.NetworkInterface(
            network=NETWORK,
            access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")],
        )
    ]


def tags(request: VmRequest) -> compute_v1.Tags | None:
    """A gang node's network tag, which its gang's firewall rule names."""
    from google.cloud import compute_v1

    return compute_v1.Tags(items=[request.network_tag]) if request.network_tag else None


def service_accounts(request: VmRequest) -> list[compute_v1.ServiceAccount]:
    from google.cloud import compute_v1

    if not request.service_account:
        return []
    scopes = [*VM_SCOPES, *([SECRETS_SCOPE] if request.reads_secrets else [])]
    return [compute_v1.ServiceAccount(email=request.service_account, scopes=scopes)]


def instance_resource(request: VmRequest) -> compute_v1.Instance:
    """The ``Instance`` body of an ``instances.insert`` call for ``request``."""
    from google.cloud import compute_v1

    accelerators = [
        compute_v1.AcceleratorConfig(
            accelerator_type=accelerator_type_url(request.zone, accelerator.type),
            accelerator_count=accelerator.count,
        )
        for accelerator in request.accelerators
    ]
    return compute_v1.Instance(
        name=request.name,
        machine_type=machine_type_url(request.zone, request.machine_type),
        disks=[boot_disk(request)],
        network_interfaces=network_interfaces(),
        labels=dict(request.labels),
        metadata=compute_v1.Metadata(items=metadata_items(request.metadata)),
        guest_accelerators=accelerators,
        service_accounts=service_accounts(request),
        scheduling=scheduling(request),
        tags=tags(request),
    )


def merged_metadata(current: compute_v1.Metadata, items: Mapping[str, str]) -> compute_v1.Metadata:
    """``current`` with ``items`` replaced or added, under ``current``'s fingerprint.

    Compute Engine replaces the whole item list on ``setMetadata`` and rejects
    the call unless it carries the fingerprint of the list it replaces.
    """
    from google.cloud import compute_v1

    merged = {item.key: item.value for item in current.items}
    merged.update(items)
    return compute_v1.Metadata(fingerprint=current.fingerprint, items=metadata_items(merged))


def short_name(url: str) -> str:
    """``.../zones/us-central1-a`` -> ``us-central1-a``."""
    return url.rsplit("/", 1)[-1]


def vm_state(status: str) -> VmState:
    """The port's state for an ``Instance.status``. A status Compute Engine adds
    after this was written is logged once and read as ``UNKNOWN`` (the VM
    exists, not running), never an error: one odd VM must not fail a listing."""
    try:
        return VmState(status)
    except ValueError:
        if status not in _UNKNOWN_STATUSES:
            _UNKNOWN_STATUSES.add(status)
            log.warning(
                "Compute Engine answered an instance status spotline does not know, "
                "%r: such a VM is taken to exist, not running",
                status,
            )
        return VmState.UNKNOWN


def vm_from_instance(instance: compute_v1.Instance) -> Vm:
    return Vm(
        name=instance.name,
        zone=short_name(instance.zone),
        state=vm_state(instance.status),
        labels=dict(instance.labels),
        machine_type=short_name(instance.machine_type),
        id=str(instance.id) if instance.id else "",
        created_at=creation_time(instance.creation_timestamp),
    )


def creation_time(stamp: str) -> datetime | None:
    """An ``Instance.creationTimestamp`` (RFC 3339 with an offset, e.g.
    ``2024-05-01T12:00:00.000-07:00``) as an aware datetime; None when absent
    or unreadable: the VM is still listed, only its age is unknown."""
    try:
        return datetime.fromisoformat(stamp) if stamp else None
    except ValueError:
        return None


def quotas_from_region(region: compute_v1.Region) -> dict[str, Quota]:
    return {q.metric: Quota(q.metric, q.limit, q.usage) for q in region.quotas}


def label_filter(labels: Mapping[str, str]) -> str:
    """An ``aggregatedList`` filter matching VMs that carry every label."""
    return " AND ".join(f'(labels.{key} = "{value}")' for key, value in sorted(labels.items()))


def insert_request(project: str, request: VmRequest) -> compute_v1.InsertInstanceRequest:
    """``instances.insert`` for ``request``; Compute Engine dedupes it by ``request_id``."""
    from google.cloud import compute_v1

    return compute_v1.InsertInstanceRequest(
        project=project,
        zone=request.zone,
        instance_resource=instance_resource(request),
        request_id=request.request_id,
    )


def set_metadata_request(
    project: str, zone: str, name: str, metadata: compute_v1.Metadata
) -> compute_v1.SetMetadataInstanceRequest:
    from google.cloud import compute_v1

    return compute_v1.SetMetadataInstanceRequest(
        project=project, zone=zone, instance=name, metadata_resource=metadata
    )


def aggregated_list_request(
    project: str, labels: Mapping[str, str]
) -> compute_v1.AggregatedListInstancesRequest:
    from google.cloud import compute_v1

    return compute_v1.AggregatedListInstancesRequest(project=project, filter=label_filter(labels))
