"""The compute port: what spotline needs from a VM provider, and its contract.

Two adapters implement it: ``GceCompute`` (Compute Engine through
google-cloud-compute) and ``LocalCompute`` (local processes running the real VM
agent). Callers depend only on this module.

Contract, for every adapter:

* ``insert(request)`` creates the VM and returns once the provider accepted it.
  Inserting a VM whose name already exists succeeds and returns that VM (the
  name is deterministic per job attempt, so this is a redelivered request, not
  a second VM). Capacity and quota failures raise ``CapacityError``; anything
  else that may pass raises ``TransientError``; a request the provider will
  never accept raises ``PermanentError``.
* ``get(zone, name)`` returns the VM or ``None`` when it does not exist.
* ``list(labels)`` returns every VM carrying all the given labels.
* ``delete(zone, name)`` removes the VM; deleting a missing VM succeeds.
* ``set_metadata(zone, name, items)`` replaces the VM's custom metadata items.
* ``stop(zone, name)`` shuts the VM down, keeping its disk (Compute Engine
  then lists it TERMINATED), and returns once it is down; stopping a stopped
  VM succeeds. False: the VM does not exist.
* ``start(zone, name)`` boots a stopped VM with its disk and metadata, and
  returns once the provider accepted it; starting a running VM succeeds. A
  missing VM raises ``PermanentError``; no capacity, ``CapacityError``.
* ``insert_gang(gang)`` creates every node of the gang in one zone, all or
  nothing, and returns them in ``gang.nodes`` order. When they already exist
  (a redelivered request), it returns them. ``CapacityError`` when no allowed
  zone can hold them all; other errors as ``insert``.
* ``region_quotas(region)`` returns the project's allocation quotas in the
  region by metric (``CPUS``, ``NVIDIA_T4_GPUS``, ...), each with its limit and
  current usage. A metric the provider does not list is absent (Compute Engine
  lists a preemptible quota only once it is granted). No permission to read
  them raises ``PermanentError``; what may pass later, ``TransientError``.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from shared.errors import SpotlineError

# Metadata key under which a VM finds its job (a JSON document).
JOB_METADATA_KEY = "spotline-job"
# Labels every spotline VM carries, so the reaper can find orphans.
MANAGED_LABEL = "spotline"


class Provisioning(StrEnum):
    SPOT = "SPOT"  # preemptible, 60-91 % cheaper, 30 s notice
    STANDARD = "STANDARD"  # on demand


class VmState(StrEnum):
    """Compute Engine instance states, as the API spells them."""

    PROVISIONING = "PROVISIONING"
    STAGING = "STAGING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    SUSPENDED = "SUSPENDED"
    TERMINATED = "TERMINATED"  # stopped, or preempted: the disk is still there


@dataclass(frozen=True)
class Accelerator:
    type: str  # e.g. "nvidia-tesla-t4"
    count: int


@dataclass(frozen=True)
class VmRequest:
    """Everything needed to create one VM; built by pure code, sent by an adapter."""

    name: str
    zone: str
    machine_type: str  # e.g. "n1-standard-8"
    provisioning: Provisioning
    request_id: str  # GCE requestId: the same attempt never creates two VMs
    image: str  # image or image family URL
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    accelerators: tuple[Accelerator, ...] = ()
    disk_gb: int = 100
    service_account: str | None = None


@dataclass(frozen=True)
class GangRequest:
    """Several identical VMs that must run together in one zone (a multi-node
    job): all are created, or none.

    ``nodes`` share everything but their names; their ``zone`` fields are
    ignored: the provider picks one of ``zones`` that can hold them all.
    """

    nodes: tuple[VmRequest, ...]
    region: str
    zones: tuple[str, ...]
    request_id: str  # one id for the whole gang: a retried bulk insert is a no-op


@dataclass(frozen=True)
class Vm:
    name: str
    zone: str
    state: VmState
    labels: dict[str, str]
    machine_type: str = ""
    id: str = ""


@dataclass(frozen=True)
class Quota:
    """One regional allocation quota, as Compute Engine's ``regions.get`` lists it."""

    metric: str  # e.g. "CPUS", "NVIDIA_L4_GPUS", "PREEMPTIBLE_NVIDIA_L4_GPUS"
    limit: float
    usage: float


class CapacityError(SpotlineError):
    """No capacity or quota for this machine in this zone: try the next option."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason  # e.g. ZONE_RESOURCE_POOL_EXHAUSTED, QUOTA_EXCEEDED


class Compute(Protocol):
    def insert(self, request: VmRequest) -> Vm: ...

    def get(self, zone: str, name: str) -> Vm | None: ...

    def list(self, labels: dict[str, str]) -> list[Vm]: ...

    def delete(self, zone: str, name: str) -> None: ...

    def set_metadata(self, zone: str, name: str, items: dict[str, str]) -> None: ...

    def stop(self, zone: str, name: str) -> bool: ...

    def start(self, zone: str, name: str) -> None: ...

    def insert_gang(self, gang: GangRequest) -> builtins.list[Vm]: ...

    def region_quotas(self, region: str) -> dict[str, Quota]: ...
