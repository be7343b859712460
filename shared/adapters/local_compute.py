"""LocalCompute: the compute port over the control API of a local ``VmHost``.

Cloud Functions code imports this module, so it uses only the standard library
(urllib), and a cold start pays nothing for it.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict
from typing import Any

from shared.domain.errors import CapacityError, PermanentError, TransientError
from shared.domain.vms import GangRequest, Quota, Vm, VmRequest, VmState

# Reasons Compute Engine gives when a zone has no room or the project no quota:
# the caller should try the next zone or machine, not retry this one.
CAPACITY_REASONS = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "QUOTA_EXCEEDED",
        "RESOURCE_POOL_EXHAUSTED",
        "STOCKOUT",
    }
)


class VmNotFound(PermanentError):
    """The VM does not exist (in that zone)."""


class LocalCompute:
    """The ``Compute`` port, served by a ``VmHost`` at ``base_url``.

    Raises, from every call: ``CapacityError`` for a capacity or quota refusal,
    ``TransientError`` when the host is unreachable or answers 5xx/429, and
    ``PermanentError`` for any other refusal.
    """

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self._base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s

    def insert(self, request: VmRequest) -> Vm:
        """Create the VM; an existing name answers the existing VM."""
        return _to_vm(self._call("POST", "/vms", asdict(request)))

    def insert_gang(self, gang: GangRequest) -> builtins.list[Vm]:
        """All the nodes in one zone, or none (CapacityError)."""
        body = {"nodes": [asdict(node) for node in gang.nodes], "zones": list(gang.zones)}
        return [_to_vm(item) for item in self._call("POST", "/gangs", body)["items"]]

    def get(self, zone: str, name: str) -> Vm | None:
        try:
            return _to_vm(self._call("GET", _vm_path(zone, name)))
        except VmNotFound:
            return None

    def list(self, labels: dict[str, str]) -> list[Vm]:
        query = urllib.parse.urlencode([("label", f"{k}={v}") for k, v in sorted(labels.items())])
        answer = self._call("GET", f"/vms?{query}" if query else "/vms")
        return [_to_vm(item) for item in answer["items"]]

    def delete(self, zone: str, name: str) -> None:
        """Stop and remove the VM; a missing VM is not an error."""
        with contextlib.suppress(VmNotFound):
            self._call("DELETE", _vm_path(zone, name))

    def set_metadata(self, zone: str, name: str, items: dict[str, str]) -> None:
        """Replace the VM's custom metadata. Raises ``VmNotFound`` when it is missing."""
        self._call("POST", _vm_path(zone, name, "metadata"), {"items": items})

    def stop(self, zone: str, name: str) -> bool:
        """Shut the VM down (SIGTERM, as an ACPI shutdown), keeping it listed."""
        try:
            self._call("POST", _vm_path(zone, name, "stop"), {})
        except VmNotFound:
            return False
        return True

    def start(self, zone: str, name: str) -> None:
        """Boot the stopped VM again: its agent starts with the same metadata."""
        self._call("POST", _vm_path(zone, name, "start"), {})

    def region_quotas(self, region: str) -> dict[str, Quota]:
        """The host's quota limits and the usage of its live VMs (it is one region)."""
        answer = self._call("GET", f"/regions/{urllib.parse.quote(region, safe='')}/quotas")
        return {
            item["metric"]: Quota(item["metric"], float(item["limit"]), float(item["usage"]))
            for item in answer["items"]
        }

    def preempt(self, zone: str, name: str, notice_s: float = 30.0) -> Vm:
        """Chaos: preempt the VM as Spot does (notice, SIGTERM, SIGKILL after ``notice_s``)."""
        return _to_vm(self._call("POST", _vm_path(zone, name, "preempt"), {"notice_s": notice_s}))

    def kill(self, zone: str, name: str) -> None:
        """Chaos: kill the VM with no notice, a preemption its agent never sees."""
        self._call("POST", _vm_path(zone, name, "kill"), {})

    def freeze(self, zone: str, name: str) -> Vm:
        """Chaos: stop the VM's processes, a hung agent that sends no heartbeat."""
        return _to_vm(self._call("POST", _vm_path(zone, name, "freeze"), {}))

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {} if data is None else {"Content-Type": "application/json"}
        request = urllib.request.Request(
            self._base_url + path, data=data, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise _error(method, path, e) from e
        except (OSError, ValueError) as e:  # URLError, refused, timeout, a garbled body
            raise TransientError(f"{method} {path}: {e}") from e


def _vm_path(zone: str, name: str, action: str = "") -> str:
    path = "/vms/" + urllib.parse.quote(name, safe="")
    if action:
        path += "/" + action
    return path + "?" + urllib.parse.urlencode({"zone": zone})


def _error(method: str, path: str, e: urllib.error.HTTPError) -> Exception:
    reason, message = "", e.reason
    try:
        error = json.loads(e.read())["error"]
        message = error.get("message", message)
        reason = error.get("errors", [{}])[0].get("reason", "")
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        pass
    finally:
        e.close()
    if reason in CAPACITY_REASONS:
        return CapacityError(reason, message)
    text = f"{method} {path}: {e.code} {reason}: {message}"
    if e.code == 404:
        return VmNotFound(text)
    if e.code >= 500 or e.code == 429:
        return TransientError(text)
    return PermanentError(text)


def _to_vm(item: dict[str, Any]) -> Vm:
    return Vm(
        name=item["name"],
        zone=item["zone"],
        state=VmState(item["state"]),
        labels=dict(item.get("labels", {})),
        machine_type=item.get("machine_type", ""),
        id=str(item.get("id", "")),
    )
