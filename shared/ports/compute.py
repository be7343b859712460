"""The compute port: what spotline needs from a VM provider, and its contract.

One adapter implements it: ``GceCompute`` (Compute Engine through
google-cloud-compute), against Compute Engine or, with ``api_endpoint``, the
local cloud (``spotline.infra.localcloud``: local processes running the real VM agent
behind Compute Engine's REST routes). Callers depend only on this module.

Contract:

* ``insert(request)`` creates the VM and returns once the provider accepted it.
  Inserting a VM whose name already exists succeeds and returns that VM (the
  name is deterministic per job attempt, so this is a redelivered request, not
  a second VM). Capacity and quota failures raise ``CapacityError``; anything
  else that may pass raises ``TransientError``; a request the provider will
  never accept (no such image or zone, a malformed field, no permission)
  raises ``Unplaceable``, a ``PermanentError``.
* ``get(zone, name)`` returns the VM or ``None`` when it does not exist.
* ``list(labels)`` returns every VM carrying all the given labels.
* ``delete(zone, name)`` removes the VM; deleting a missing VM succeeds.
* ``delete_many(vms)`` removes every ``(zone, name)`` VM, as ``delete`` does,
  sending every delete before waiting for any: a gang's nodes go together.
* ``set_metadata(zone, name, items, unless)`` sets ``items`` among the VM's
  custom metadata items, keeping the others; with ``unless``, only when it is
  False of the VM's items as they are (read and written under one fingerprint:
  a concurrent change raises ``TransientError``).
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
* ``allow_gang(tag)`` makes the firewall rule ``tag`` that lets VMs carrying
  the network tag ``tag`` (``VmRequest.network_tag``) reach each other, and
  returns once it is in force; a rule of that name existing already is
  success. ``end_gang(tag)`` deletes it; deleting a missing rule succeeds.
  ``gang_rules()`` lists the names of such rules.
  (``spotline.shared.domain.gang_network`` says when each is called.)
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Protocol

from spotline.shared.domain.vms import GangRequest, Quota, Vm, VmRequest


class Compute(Protocol):
    def insert(self, request: VmRequest) -> Vm: ...

    def get(self, zone: str, name: str) -> Vm | None: ...

    def list(self, labels: dict[str, str]) -> list[Vm]: ...

    def delete(self, zone: str, name: str) -> None: ...

    def delete_many(self, vms: Sequence[tuple[str, str]]) -> None: ...

    def set_metadata(
        self,
        zone: str,
        name: str,
        items: dict[str, str],
        unless: Callable[[dict[str, str]], bool] | None = None,
    ) -> None: ...

    def stop(self, zone: str, name: str) -> bool: ...

    def start(self, zone: str, name: str) -> None: ...

    def insert_gang(self, gang: GangRequest) -> builtins.list[Vm]: ...

    def region_quotas(self, region: str) -> dict[str, Quota]: ...

    def allow_gang(self, tag: str) -> None: ...

    def end_gang(self, tag: str) -> None: ...

    def gang_rules(self) -> builtins.list[str]: ...
