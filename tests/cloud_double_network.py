"""Compute Engine's networks and firewalls, for ``CloudDouble``: what ``spotline
deploy`` and ``destroy`` send for the VMs' network.

Every body is checked against the compute v1 discovery document that
``google-api-python-client`` ships (``tests.discovery``): a field the schema
does not hold, an enum value it does not list, or a wrong JSON type is refused
as Google's front end refuses it. Like the real API it also refuses: a second
insert of a name; a network without ``autoCreateSubnetworks`` (which would be
a legacy network); a firewall rule without a protocol, on a network that does
not exist, naming a service account of the project that does not exist, or
mixing service accounts with tags (the Firewall schema's own rules); deleting
a network a firewall rule still uses. Operations are done when answered.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from spotline.infra.localcloud.wire import ApiError, RecordedRequest
from tests import discovery
from tests.cloud_double_wire import JsonDict

_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "boolean": (bool,),
    "integer": (int, str),  # int32 travels as a number, int64 as a string
    "array": (list,),
    "object": (dict,),
}


def schema_problems(schema: str, body: Any, where: str = "") -> list[str]:
    """What in ``body`` the discovery document's ``schema`` does not allow."""
    spec = discovery.document("compute")["schemas"][schema]
    return _problems(spec, body, where or schema)


def _problems(spec: dict[str, Any], value: Any, where: str) -> list[str]:
    if "$ref" in spec:
        return schema_problems(spec["$ref"], value, where)
    kind = spec.get("type", "object")
    if not isinstance(value, _JSON_TYPES[kind]) or (kind == "integer" and isinstance(value, bool)):
        return [f"{where}: {value!r} is not of type {kind}"]
    if "enum" in spec and value not in spec["enum"]:
        return [f"{where}: {value!r} is not one of {spec['enum']}"]
    if isinstance(value, list):
        return [p for item in value for p in _problems(spec["items"], item, where)]
    if isinstance(value, dict) and "properties" in spec:
        found: list[str] = []
        for key, item in value.items():
            if key not in spec["properties"]:
                found.append(f'Invalid JSON payload received. Unknown name "{key}" at {where}')
            else:
                found += _problems(spec["properties"][key], item, f"{where}.{key}")
        return found
    return []


def discovery_method(method: str, path: str) -> str | None:
    """The compute v1 method (``firewalls.insert``...) a request is, by its HTTP
    method and path as the discovery document spells them; None for none."""
    doc = discovery.document("compute")
    base = "/" + doc["servicePath"]
    for resource, methods in doc["resources"].items():
        for name, spec in methods.get("methods", {}).items():
            pattern = re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(base + spec["path"]))
            if spec["httpMethod"] == method and re.fullmatch(pattern, path):
                return f"{resource}.{name}"
    return None


class NetworkApi:
    """One project's networks and firewall rules, as their JSON, by name."""

    def __init__(self, project: str, accounts: dict[str, JsonDict]) -> None:
        self.project = project
        self.accounts = accounts  # the project's service accounts, by email
        self.networks: dict[str, JsonDict] = {}
        self.firewalls: dict[str, JsonDict] = {}
        self._ids = itertools.count(1)

    def routes(self) -> list[tuple[str, str, Any]]:
        g = r"^/compute/v1/projects/(?P<project>[^/]+)/global"
        return [
            ("GET", g + r"/networks/(?P<name>[^/]+)$", self._get_network),
            ("POST", g + r"/networks$", self._insert_network),
            ("DELETE", g + r"/networks/(?P<name>[^/]+)$", self._delete_network),
            ("GET", g + r"/firewalls$", self._list_firewalls),
            ("GET", g + r"/firewalls/(?P<name>[^/]+)$", self._get_firewall),
            ("POST", g + r"/firewalls$", self._insert_firewall),
            ("PUT", g + r"/firewalls/(?P<name>[^/]+)$", self._update_firewall),
            ("DELETE", g + r"/firewalls/(?P<name>[^/]+)$", self._delete_firewall),
        ]

    def _link(self, kind: str, name: str) -> str:
        base = "https://www.googleapis.com/compute/v1"
        return f"{base}/projects/{self.project}/global/{kind}/{name}"

    def _operation(self, kind: str, verb: str, name: str) -> JsonDict:
        number = next(self._ids)
        return {
            "kind": "compute#operation",
            "id": str(number),
            "name": f"operation-{number}",
            "operationType": verb,
            "targetLink": self._link(kind, name),
            "status": "DONE",
            "progress": 100,
        }

    # -- networks -----------------------------------------------------------------------

    def _get_network(self, request: RecordedRequest, name: str) -> JsonDict:
        if name not in self.networks:
            raise ApiError(404, f"The resource 'projects/{self.project}/global/networks/{name}' "
                           "was not found")  # fmt: skip
        return self.networks[name]

    def _insert_network(self, request: RecordedRequest) -> JsonDict:
        body = dict(request.body or {})
        problems = schema_problems("Network", body)
        name = str(body.get("name", ""))
        if not _NAME.fullmatch(name):
            problems.append(f"Invalid value for field 'resource.name': {name!r}")
        if "autoCreateSubnetworks" not in body:
            problems.append("autoCreateSubnetworks unset: that makes a legacy network")
        if problems:
            raise ApiError(400, "; ".join(problems))
        if name in self.networks:
            raise ApiError(409, f"The resource 'projects/{self.project}/global/networks/{name}' "
                           "already exists")  # fmt: skip
        body.update(kind="compute#network", id=str(next(self._ids)),
                    selfLink=self._link("networks", name))  # fmt: skip
        self.networks[name] = body
        return self._operation("networks", "insert", name)

    def _delete_network(self, request: RecordedRequest, name: str) -> JsonDict:
        self._get_network(request, name)
        users = [f for f in self.firewalls.values() if self._network_of(f) == name]
        if users:
            raise ApiError(
                400,
                f"The network resource 'projects/{self.project}/global/networks/{name}' is already "
                f"being used by 'projects/{self.project}/global/firewalls/{users[0]['name']}'",
            )
        del self.networks[name]
        return self._operation("networks", "delete", name)

    # -- firewalls ------------------------------------------------------------------------

    def _list_firewalls(self, request: RecordedRequest) -> JsonDict:
        return {"kind": "compute#firewallList", "items": list(self.firewalls.values())}

    def _get_firewall(self, request: RecordedRequest, name: str) -> JsonDict:
        if name not in self.firewalls:
            raise ApiError(404, f"The resource 'projects/{self.project}/global/firewalls/{name}' "
                           "was not found")  # fmt: skip
        return self.firewalls[name]

    def _insert_firewall(self, request: RecordedRequest) -> JsonDict:
        body = self._checked_firewall(request.body)
        name = body["name"]
        if name in self.firewalls:
            raise ApiError(409, f"The resource 'projects/{self.project}/global/firewalls/{name}' "
                           "already exists")  # fmt: skip
        self.firewalls[name] = body
        return self._operation("firewalls", "insert", name)

    def _update_firewall(self, request: RecordedRequest, name: str) -> JsonDict:
        self._get_firewall(request, name)
        body = self._checked_firewall(request.body)
        if body["name"] != name:
            raise ApiError(400, f"the rule's name {body['name']!r} is not {name!r}")
        self.firewalls[name] = body
        return self._operation("firewalls", "update", name)

    def _delete_firewall(self, request: RecordedRequest, name: str) -> JsonDict:
        self._get_firewall(request, name)
        del self.firewalls[name]
        return self._operation("firewalls", "delete", name)

    def _checked_firewall(self, given: Any) -> JsonDict:
        body = dict(given or {})
        problems = schema_problems("Firewall", body)
        name = str(body.get("name", ""))
        if not _NAME.fullmatch(name):
            problems.append(f"Invalid value for field 'resource.name': {name!r}")
        if self._network_of(body) not in self.networks:
            problems.append(f"The network {body.get('network')!r} does not exist")
        if not body.get("allowed") and not body.get("denied"):
            problems.append("a rule allows or denies something")
        if any(not a.get("IPProtocol") for a in body.get("allowed", [])):
            problems.append("Required field 'IPProtocol' not specified")
        accounts = [*body.get("sourceServiceAccounts", []), *body.get("targetServiceAccounts", [])]
        if accounts and (body.get("sourceTags") or body.get("targetTags")):
            problems.append("service accounts cannot be used with tags in one rule")
        for email in accounts:
            ours = email.endswith(f"@{self.project}.iam.gserviceaccount.com")
            if ours and email not in self.accounts:
                problems.append(f"The service account {email} does not exist")
        if problems:
            raise ApiError(400, "; ".join(problems))
        body.update(kind="compute#firewall", selfLink=self._link("firewalls", name))
        body.setdefault("direction", "INGRESS")
        body.setdefault("priority", 1000)
        body["network"] = self._link("networks", self._network_of(body))
        return body

    def _network_of(self, firewall: JsonDict) -> str:
        # A full or partial URL; unset means the default network.
        return str(firewall.get("network") or "global/networks/default").rsplit("/", 1)[-1]
