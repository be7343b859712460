"""The one IAM role spotline defines itself: what the functions need to make
and delete a gang's firewall rule (``spotline.shared.domain.gang_network``),
and nothing else.

Google's predefined role with these rights, ``compute.securityAdmin``, also
lets its holder change every firewall rule, SSL policy and security policy of
the project: far more than placing VMs needs. Inserting a rule takes
``compute.firewalls.create`` and ``compute.networks.updatePolicy`` on its
network; deleting one, ``compute.firewalls.delete`` and the same network
right; ``get`` and ``list`` let the functions and the reaper read them back.
(The VMs' network tags are set at insert, under ``compute.instances.setTags``,
which ``compute.instanceAdmin.v1`` holds already.)

A deleted custom role stays for 7 days, when ``undelete`` brings it back,
and its id cannot be used again for 37: a deploy finds it deleted and
undeletes it; past those 7 days, IAM refuses the id until the 37 have passed
(the error says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spotline.infra.deploy.clients import ProjectClients

Record = Callable[[str, str, str, str], None]  # kind, name, action, detail


@dataclass(frozen=True)
class CustomRole:
    role_id: str
    title: str
    description: str
    permissions: tuple[str, ...]

    def name(self, project: str) -> str:
        return f"projects/{project}/roles/{self.role_id}"


GANG_FIREWALLS = CustomRole(
    "spotlineGangFirewalls",
    "spotline gang firewall rules",
    "Makes and deletes the firewall rule that lets one multi-node job's VMs reach each other.",
    (
        "compute.firewalls.create",
        "compute.firewalls.delete",
        "compute.firewalls.get",
        "compute.firewalls.list",
        "compute.networks.updatePolicy",
    ),
)
ROLES = (GANG_FIREWALLS,)


class CustomRoles:
    """spotline's custom roles in the project: made, brought back, or set
    right (``ensure``); deleted (``delete``)."""

    def __init__(
        self, clients: ProjectClients, project: str, *, dry_run: bool, record: Record
    ) -> None:
        self.clients = clients
        self.project = project
        self.dry_run = dry_run
        self._record = record

    def ensure(self) -> None:
        for role in ROLES:
            self._ensure(role)

    def delete(self) -> None:
        for role in ROLES:
            current = self.clients.iam_get(role.name(self.project))
            if current is None or current.get("deleted"):
                self._record("role", role.role_id, "absent", "")
                continue
            if not self.dry_run:
                self.clients.iam_call("DELETE", role.name(self.project), None)
            self._record("role", role.role_id, "deleted", "kept by IAM for 7 days")

    def _ensure(self, role: CustomRole) -> None:
        path = role.name(self.project)
        current = self.clients.iam_get(path)
        if current is None:
            if not self.dry_run:
                body = {"roleId": role.role_id, "role": _body(role)}
                self.clients.iam_call("POST", f"projects/{self.project}/roles", body)
            self._record("role", role.role_id, "created", ", ".join(role.permissions))
            return
        if current.get("deleted"):
            if not self.dry_run:
                current = self.clients.iam_call(
                    "POST", f"{path}:undelete", {"etag": current.get("etag", "")}
                )
            self._record("role", role.role_id, "undeleted", "")
        if sorted((current or {}).get("includedPermissions", [])) == sorted(role.permissions):
            self._record("role", role.role_id, "unchanged", "")
            return
        if not self.dry_run:
            # Every permission named, so one added by hand goes: the role is ours.
            self.clients.iam_call(
                "PATCH", path, _body(role), params={"updateMask": "includedPermissions"}
            )
        self._record("role", role.role_id, "updated", ", ".join(role.permissions))


def _body(role: CustomRole) -> dict[str, Any]:
    return {
        "title": role.title,
        "description": role.description,
        "includedPermissions": list(role.permissions),
        "stage": "GA",
    }
