"""Compute Engine's firewall rules, for the local cloud: what the functions
make and delete for a gang (``spotline.shared.domain.gang_network``).

The request's shape is checked against the discovery document by the API's
recorder (``discovery.Contract``); here, what the schema cannot say and
Compute Engine refuses: a name that is not RFC 1035, a second insert of a
name (409), a rule on a network that does not exist, a rule that allows no
protocol, and service accounts mixed with tags. Operations are global.

The local "VMs" are processes on one loopback address: a rule is recorded,
never enforced (the docs say what the local cloud cannot know).
"""

from __future__ import annotations

import re
import threading
from typing import Any

from spotline.infra.localcloud.instances import SELF_LINK_BASE
from spotline.infra.localcloud.wire import ApiError, JsonDict
from spotline.shared.domain import tenancy

_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
# The networks of the local project: the default one, and the one
# ``spotline deploy`` makes for the VMs.
NETWORKS = ("default", tenancy.NETWORK)


class Firewalls:
    """One project's firewall rules, as Compute Engine answers them, by name."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.rules: dict[str, JsonDict] = {}
        self._ids = iter(range(5000, 10**9))
        self._lock = threading.Lock()

    def link(self, name: str) -> str:
        return f"{SELF_LINK_BASE}/projects/{self.project}/global/firewalls/{name}"

    def insert(self, body: Any) -> str:
        """The rule's name, once made. Raises ``ApiError`` as Compute Engine would."""
        rule = self._checked(body)
        with self._lock:
            if rule["name"] in self.rules:
                raise ApiError(409, f"The resource '{self._path(rule['name'])}' already exists",
                               "alreadyExists")  # fmt: skip
            rule["id"] = str(next(self._ids))
            self.rules[rule["name"]] = rule
        return str(rule["name"])

    def get(self, name: str) -> JsonDict:
        with self._lock:
            if name not in self.rules:
                raise ApiError(404, f"The resource '{self._path(name)}' was not found", "notFound")
            return dict(self.rules[name])

    def delete(self, name: str) -> None:
        with self._lock:
            if self.rules.pop(name, None) is None:
                raise ApiError(404, f"The resource '{self._path(name)}' was not found", "notFound")

    def listing(self) -> JsonDict:
        with self._lock:
            items = [dict(rule) for rule in self.rules.values()]
        return {
            "kind": "compute#firewallList",
            "id": f"projects/{self.project}/global/firewalls",
            "items": items,
            "selfLink": f"{SELF_LINK_BASE}/projects/{self.project}/global/firewalls",
        }

    def _path(self, name: str) -> str:
        return f"projects/{self.project}/global/firewalls/{name}"

    def _checked(self, given: Any) -> JsonDict:
        body = dict(given or {})
        problems = []
        name = str(body.get("name", ""))
        if not _NAME.fullmatch(name):
            problems.append(f"Invalid value for field 'resource.name': '{name}'")
        network = str(body.get("network") or "global/networks/default")
        found = re.fullmatch(rf"(?:.*/)?(?:projects/{re.escape(self.project)}/)?global/networks/"
                             r"(?P<net>[^/]+)", network)  # fmt: skip
        if found is None or found["net"] not in NETWORKS:
            problems.append(f"Invalid value for field 'resource.network': '{network}'. "
                            "The referenced network resource cannot be found.")  # fmt: skip
        if not body.get("allowed") and not body.get("denied"):
            problems.append("Required field 'allowed' or 'denied' not specified")
        if any(not a.get("IPProtocol") for a in body.get("allowed", [])):
            problems.append("Required field 'IPProtocol' not specified")
        accounts = [*body.get("sourceServiceAccounts", []), *body.get("targetServiceAccounts", [])]
        if accounts and (body.get("sourceTags") or body.get("targetTags")):
            problems.append("Service accounts cannot be used with tags in one firewall rule")
        for tag in [*body.get("sourceTags", []), *body.get("targetTags", [])]:
            if not _NAME.fullmatch(str(tag)):
                problems.append(f"Invalid value for a network tag: '{tag}'")
        if problems:
            raise ApiError(400, "; ".join(problems), "invalid")
        net = found["net"] if found else "default"
        body.update(
            kind="compute#firewall",
            selfLink=self.link(name),
            network=f"{SELF_LINK_BASE}/projects/{self.project}/global/networks/{net}",
            creationTimestamp="2024-05-01T12:00:00.000-07:00",
        )
        body.setdefault("direction", "INGRESS")
        body.setdefault("priority", 1000)
        return body
