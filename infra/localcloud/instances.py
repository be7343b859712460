"""The local cloud's VMs: what an insert asks for (``Spec``), what a VM is
(``Instance``), and how Compute Engine writes one in JSON.

Specs come from Compute Engine's own request bodies (``instances.insert``'s
``Instance``, ``bulkInsert``'s ``instanceProperties``) or, for tests and tools
that put a VM in place directly, from ``VmRequest`` fields.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from spotline.infra.localcloud.errors import Invalid
from spotline.infra.localcloud.launchers import Run
from spotline.infra.localcloud.quotas import Charge
from spotline.infra.localcloud.resource_rules import check_labels, check_metadata
from spotline.infra.localcloud.scheduling import check_scheduling
from spotline.shared.domain.vms import Provisioning, VmState

JsonDict = dict[str, Any]
SELF_LINK_BASE = "https://www.googleapis.com/compute/v1"
# Compute Engine's rule for instance names; it also keeps a name safe as a file name.
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Spec:
    """One VM as a request describes it."""

    name: str
    zone: str
    machine_type: str
    provisioning: Provisioning = Provisioning.SPOT
    labels: Mapping[str, str] = field(default_factory=dict)
    metadata: Mapping[str, str] = field(default_factory=dict)
    accelerators: tuple[tuple[str, int], ...] = ()
    image: str = ""  # the boot disk's sourceImage, as sent ("": none named)
    resource: Mapping[str, Any] = field(default_factory=dict)  # the rest of the body, echoed

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise Invalid(f"Invalid value for field 'resource.name': '{self.name}'.")
        if not (self.zone and self.machine_type):
            raise Invalid(f"Invalid zone or machine type for '{self.name}'.")


def region_of(zone: str) -> str:
    """``us-central1-a`` -> ``us-central1``."""
    return zone.rsplit("-", 1)[0]


def short_name(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def zonal_type(url: str, zone: str, kind: str) -> str:
    """The short name in ``[.../]zones/ZONE/KIND/NAME``, checking the zone."""
    match = re.fullmatch(rf"(?:.*/)?zones/{re.escape(zone)}/{kind}/([\w-]+)", url)
    if match is None:
        raise Invalid(f"Invalid value for a {kind} of zone {zone}: '{url}'.")
    return match[1]


def spec_from_resource(body: Mapping[str, Any], zone: str, *, zonal_urls: bool = True) -> Spec:
    """The spec of an ``Instance`` (``zonal_urls``) or of bulk insert's
    ``instanceProperties`` (short type names) to be made in ``zone``."""
    try:
        machine = str(body.get("machineType") or "")
        accelerators = [
            (str(a.get("acceleratorType") or ""), int(a.get("acceleratorCount") or 0))
            for a in body.get("guestAccelerators") or []
        ]
        if zonal_urls:
            machine = zonal_type(machine, zone, "machineTypes")
            accelerators = [(zonal_type(t, zone, "acceleratorTypes"), n) for t, n in accelerators]
        elif any("/" in name for name in [machine, *(t for t, _ in accelerators)]):
            raise Invalid("bulkInsert's instanceProperties take short type names.")
        scheduling = body.get("scheduling") or {}
        check_scheduling(scheduling, machine, accelerators)
        model = str(scheduling.get("provisioningModel") or "STANDARD")
        items = (body.get("metadata") or {}).get("items") or []
        labels = {str(k): str(v) for k, v in (body.get("labels") or {}).items()}
        check_labels(labels)
        check_metadata((str(item["key"]), str(item.get("value", ""))) for item in items)
        boot = [d for d in body.get("disks") or [] if d.get("boot")]
        image = (boot[0].get("initializeParams") or {}).get("sourceImage") if boot else None
        return Spec(
            name=str(body.get("name") or ""),
            zone=zone,
            machine_type=machine,
            provisioning=Provisioning(model),
            labels=labels,
            metadata={str(item["key"]): str(item.get("value", "")) for item in items},
            accelerators=tuple(accelerators),
            image=str(image or ""),
            resource=dict(body),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise Invalid(f"Invalid instance resource: {e}") from e


def spec_from_request(fields: Mapping[str, Any]) -> Spec:
    """The spec of ``VmRequest`` fields as a dict (a VM put in place directly)."""
    accelerators = tuple(
        (str(a["type"]), int(a["count"])) for a in fields.get("accelerators") or []
    )
    return Spec(
        name=str(fields.get("name") or ""),
        zone=str(fields.get("zone") or ""),
        machine_type=str(fields.get("machine_type") or ""),
        provisioning=Provisioning(str(fields.get("provisioning") or Provisioning.SPOT)),
        labels=dict(fields.get("labels") or {}),
        metadata=dict(fields.get("metadata") or {}),
        accelerators=accelerators,
    )


def fingerprint(items: Mapping[str, str]) -> str:
    """A metadata fingerprint: it changes whenever the items do."""
    digest = hashlib.sha256(json.dumps(sorted(items.items())).encode()).digest()
    return base64.b64encode(digest[:8]).decode()


@dataclass
class Instance:
    """One VM of the local cloud."""

    spec: Spec
    id: str  # 19 digits, as on Compute Engine
    charge: Charge  # what it takes of its region's quotas while not TERMINATED
    metadata: dict[str, str]
    status: VmState = VmState.RUNNING
    preempted: bool = False
    removing: bool = False  # being deleted, preempted or killed: forget it once ended
    run: Run | None = None
    exit_code: int | None = None
    # A status answered instead of ``status``: one the model does not play
    # itself (DEPROVISIONING, REPAIRING, a status Compute Engine adds later).
    shown_status: str | None = None
    # Set once the VM is gone (deleted, preempted, killed): its delete's operation is done.
    gone: threading.Event = field(default_factory=threading.Event)
    # Answered as creationTimestamp: spotline charges an ended job for a VM
    # its attempts never recorded from this moment on.
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def zone(self) -> str:
        return self.spec.zone

    def to_json(self, project: str) -> JsonDict:
        """The ``compute#instance`` Compute Engine answers for this VM."""
        zone_url = f"{SELF_LINK_BASE}/projects/{project}/zones/{self.zone}"
        accelerators = [
            {"acceleratorType": f"{zone_url}/acceleratorTypes/{kind}", "acceleratorCount": n}
            for kind, n in self.spec.accelerators
        ]
        return {
            **self.spec.resource,
            "kind": "compute#instance",
            "id": self.id,
            "creationTimestamp": self.created_at.isoformat(timespec="milliseconds"),
            "name": self.name,
            "status": self.shown_status or self.status.value,
            "zone": zone_url,
            "machineType": f"{zone_url}/machineTypes/{self.spec.machine_type}",
            "guestAccelerators": accelerators,
            "labels": dict(self.spec.labels),
            "metadata": {
                "kind": "compute#metadata",
                "fingerprint": fingerprint(self.metadata),
                "items": [{"key": k, "value": v} for k, v in self.metadata.items()],
            },
            "selfLink": f"{zone_url}/instances/{self.name}",
        }

    def summary(self) -> JsonDict:
        """The VM for local tools and tests: its fields and its boot's process."""
        return {
            "name": self.name,
            "zone": self.zone,
            "machine_type": self.spec.machine_type,
            "provisioning": self.spec.provisioning.value,
            "state": self.status.value,
            "labels": dict(self.spec.labels),
            "metadata": dict(self.metadata),
            "preempted": self.preempted,
            "id": self.id,
            "metadata_host": self.run.metadata_host if self.run else "",
            "pid": self.run.pid if self.run else None,
            "exit_code": self.exit_code,
        }
