"""A local HTTP double of the Compute Engine REST API, for the real client library.

It serves the few routes ``GceCompute`` sends, answers with the JSON Compute
Engine answers, and records every request so tests can check the wire format::

    with ComputeDouble() as gce:
        compute = GceCompute(gce.project, api_endpoint=gce.endpoint,
                             credentials=AnonymousCredentials())
        compute.insert(request)
        assert gce.requests_to("POST", "/instances")[0].query["requestId"] == ...

Like Compute Engine it dedupes inserts and bulk inserts by ``requestId``,
answers 409 to a second insert of a name, checks the metadata fingerprint, and
can be told to fail inserts with a capacity error, either in the HTTP answer or
in the operation. A regional bulk insert puts all its VMs in the first allowed
zone, by name, that has capacity for them. ``regions.get`` answers the quotas a
test puts in ``region_quotas``.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
from dataclasses import dataclass
from typing import Any

from tests.compute_double_wire import (
    ApiError,
    Handler,
    JsonDict,
    RecordedRequest,
    check_bulk_insert,
    instance_path,
    metadata,
    parse_label_filter,
    region_resource,
)
from tests.http_double import HttpDouble

__all__ = ["ApiError", "ComputeDouble", "RecordedRequest"]

SELF_LINK_BASE = "https://www.googleapis.com/compute/v1"
_PREFIX = r"^/compute/v1/projects/(?P<project>[^/]+)"
_ZONE = _PREFIX + r"/zones/(?P<zone>[^/]+)"
_REGION = _PREFIX + r"/regions/(?P<region>[^/]+)"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(_ZONE + r"/instances$"), "_insert"),
    ("GET", re.compile(_ZONE + r"/instances/(?P<name>[^/]+)$"), "_get"),
    ("DELETE", re.compile(_ZONE + r"/instances/(?P<name>[^/]+)$"), "_delete"),
    ("POST", re.compile(_ZONE + r"/instances/(?P<name>[^/]+)/setMetadata$"), "_set_metadata"),
    ("POST", re.compile(_ZONE + r"/instances/(?P<name>[^/]+)/stop$"), "_stop"),
    ("POST", re.compile(_ZONE + r"/instances/(?P<name>[^/]+)/start$"), "_start"),
    ("GET", re.compile(_PREFIX + r"/aggregated/instances$"), "_aggregated_list"),
    ("POST", re.compile(_ZONE + r"/operations/(?P<op>[^/]+)/wait$"), "_wait"),
    ("POST", re.compile(_REGION + r"/instances/bulkInsert$"), "_bulk_insert"),
    ("POST", re.compile(_REGION + r"/operations/(?P<op>[^/]+)/wait$"), "_region_wait"),
    ("GET", re.compile(_REGION + r"$"), "_region"),
]


@dataclass
class _InsertFailure:
    reason: str
    message: str
    status: int | None  # None: the insert is accepted and its operation fails


@dataclass
class _Failure:
    method: str
    path_pattern: re.Pattern[str]
    status: int
    reason: str
    times: int


class ComputeDouble(HttpDouble):
    """Compute Engine for one project, on ``127.0.0.1`` and a free port.

    Args:
        project: the only project the double knows.
        operation_polls: how many ``wait`` calls it takes to see an operation
            DONE. Compute Engine answers a mutating call with a RUNNING
            operation; 0 makes the call's own answer DONE.

    Attributes:
        instances: the VMs, by ``(zone, name)``, as Compute Engine's JSON.
        region_quotas: each known region's quotas, metric -> (limit, usage).
    """

    handler_class = Handler

    def __init__(self, project: str = "test-project", *, operation_polls: int = 1) -> None:
        self.project = project
        self.operation_polls = operation_polls
        self.instances: dict[tuple[str, str], JsonDict] = {}
        self.region_quotas: dict[str, dict[str, tuple[float, float]]] = {}
        self._requests: list[RecordedRequest] = []
        self._operations: dict[str, JsonDict] = {}
        self._operation_scopes: dict[str, str] = {}  # zones/Z or regions/R
        self._pending_polls: dict[str, int] = {}
        self._by_request_id: dict[str, str] = {}
        self._insert_failures: dict[tuple[str, str], _InsertFailure] = {}
        self._failures: list[_Failure] = []
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()

    def fail_inserts(
        self,
        zone: str,
        machine_type: str,
        reason: str = "ZONE_RESOURCE_POOL_EXHAUSTED",
        *,
        status: int | None = None,
        message: str | None = None,
    ) -> None:
        """Fail every insert of ``machine_type`` in ``zone``.

        With ``status`` the insert call itself fails with that HTTP status and
        ``reason``; without, the insert is accepted and its operation finishes
        with ``reason`` as ``error.errors[].code``. A bulk insert passes over the
        zone, and fails so only when every allowed zone fails (with the first's).
        """
        text = message or (
            f"The zone 'projects/{self.project}/zones/{zone}' does not have enough "
            "resources available to fulfill the request.  Try a different zone, "
            "or try again later."
        )
        self._insert_failures[(zone, machine_type)] = _InsertFailure(reason, text, status)

    def fail_next(
        self,
        method: str,
        path_pattern: str,
        status: int,
        reason: str = "backendError",
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests whose path matches with an error."""
        self._failures.append(_Failure(method, re.compile(path_pattern), status, reason, times))

    def add_instance(
        self,
        zone: str,
        name: str,
        *,
        labels: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None,
        status: str = "RUNNING",
        machine_type: str = "n1-standard-4",
    ) -> JsonDict:
        """Put a VM in place, as if another caller had created it."""
        body = {
            "name": name,
            "machineType": f"zones/{zone}/machineTypes/{machine_type}",
            "labels": labels or {},
            "metadata": {"items": [{"key": k, "value": v} for k, v in (metadata or {}).items()]},
        }
        with self._lock:
            instance = self._new_instance(zone, body)
            instance["status"] = status
            return instance

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_to(self, method: str, path_suffix: str) -> list[RecordedRequest]:
        """The recorded requests with this method whose path ends with ``path_suffix``."""
        return [r for r in self.requests if r.method == method and r.path.endswith(path_suffix)]

    def handle(self, request: RecordedRequest) -> tuple[int, JsonDict]:
        """Record ``request`` and answer it: an HTTP status and a JSON body."""
        with self._lock:
            self._requests.append(request)
            try:
                return 200, self._answer(request.method, request.path, request.query, request.body)
            except ApiError as error:
                return error.status, error.body

    def _answer(self, method: str, path: str, query: dict[str, str], body: Any) -> JsonDict:
        for failure in self._failures:
            if failure.method == method and failure.path_pattern.search(path):
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.remove(failure)
                raise ApiError(failure.status, failure.reason, f"injected {failure.status}")
        for route_method, pattern, handler in _ROUTES:
            match = pattern.match(path)
            if route_method == method and match:
                params = match.groupdict()
                if params.pop("project") != self.project:
                    raise ApiError(404, "notFound", f"The project {self.project} was not found")
                result: JsonDict = getattr(self, handler)(query=query, body=body, **params)
                return result
        raise ApiError(404, "notFound", f"no route for {method} {path}")

    def _insert(self, zone: str, query: dict[str, str], body: Any) -> JsonDict:
        request_id = query.get("requestId")
        if request_id in self._by_request_id:
            return self._operations[self._by_request_id[request_id]]
        name = body.get("name", "")
        types = [body.get("machineType", "")]
        types += [a["acceleratorType"] for a in body.get("guestAccelerators", [])]
        for url in types:
            if not re.fullmatch(rf"zones/{zone}/(machineTypes|acceleratorTypes)/[\w-]+", url):
                raise ApiError(400, "invalid", f"Invalid value for a type of {name!r}: {url!r}")
        if (zone, name) in self.instances:
            path = instance_path(self.project, zone, name)
            raise ApiError(409, "alreadyExists", f"The resource '{path}' already exists")
        failure = self._insert_failures.get((zone, types[0].rsplit("/", 1)[-1]))
        if failure is not None and failure.status is not None:
            raise ApiError(failure.status, failure.reason, failure.message)
        if failure is None:
            self._new_instance(zone, body)
        operation = self._new_operation(f"zones/{zone}", "insert", name, failure)
        if request_id:
            self._by_request_id[request_id] = operation["name"]
        return operation

    def _get(self, zone: str, name: str, query: dict[str, str], body: Any) -> JsonDict:
        return self._instance(zone, name)

    def _delete(self, zone: str, name: str, query: dict[str, str], body: Any) -> JsonDict:
        self._instance(zone, name)
        del self.instances[(zone, name)]
        return self._new_operation(f"zones/{zone}", "delete", name)

    def _stop(self, zone: str, name: str, query: dict[str, str], body: Any) -> JsonDict:
        self._instance(zone, name)["status"] = "TERMINATED"  # as a stopped VM is listed
        return self._new_operation(f"zones/{zone}", "stop", name)

    def _start(self, zone: str, name: str, query: dict[str, str], body: Any) -> JsonDict:
        self._instance(zone, name)["status"] = "RUNNING"
        return self._new_operation(f"zones/{zone}", "start", name)

    def _set_metadata(self, zone: str, name: str, query: dict[str, str], body: Any) -> JsonDict:
        instance = self._instance(zone, name)
        if body.get("fingerprint") != instance["metadata"]["fingerprint"]:
            raise ApiError(
                412,
                "conditionNotMet",
                "Supplied fingerprint does not match current metadata fingerprint.",
            )
        instance["metadata"] = metadata(body.get("items", []))
        return self._new_operation(f"zones/{zone}", "setMetadata", name)

    def _aggregated_list(self, query: dict[str, str], body: Any) -> JsonDict:
        wanted = parse_label_filter(query.get("filter", ""))
        by_zone: dict[str, list[JsonDict]] = {}
        for (zone, _), instance in sorted(self.instances.items()):
            if wanted.items() <= instance.get("labels", {}).items():
                by_zone.setdefault(f"zones/{zone}", []).append(instance)
        return {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{self.project}/aggregated/instances",
            "items": {scope: {"instances": found} for scope, found in by_zone.items()},
            "selfLink": f"{SELF_LINK_BASE}/projects/{self.project}/aggregated/instances",
        }

    def _bulk_insert(self, region: str, query: dict[str, str], body: Any) -> JsonDict:
        request_id = query.get("requestId")
        if request_id in self._by_request_id:
            return self._operations[self._by_request_id[request_id]]
        names = list(body.get("perInstanceProperties", {}))
        properties = body.get("instanceProperties", {})
        locations = body.get("locationPolicy", {}).get("locations", {})
        zones = sorted(
            key.removeprefix("zones/")
            for key, location in locations.items()
            if location.get("preference") == "ALLOW"
        )
        check_bulk_insert(region, body, names, zones)
        taken = [(zone, name) for zone in zones for name in names if (zone, name) in self.instances]
        if taken:
            path = instance_path(self.project, *taken[0])
            raise ApiError(409, "alreadyExists", f"The resource '{path}' already exists")
        failures = [self._insert_failures.get((zone, properties["machineType"])) for zone in zones]
        free = [zone for zone, failure in zip(zones, failures, strict=True) if failure is None]
        failure = None if free else failures[0]
        if failure is not None and failure.status is not None:
            raise ApiError(failure.status, failure.reason, failure.message)
        for name in names if free else []:
            self._new_instance(free[0], _zonal_instance(free[0], name, properties))
        operation = self._new_operation(f"regions/{region}", "bulkInsert", None, failure)
        if request_id:
            self._by_request_id[request_id] = operation["name"]
        return operation

    def _region(self, region: str, query: dict[str, str], body: Any) -> JsonDict:
        quotas = self.region_quotas.get(region)
        if quotas is None:
            path = f"projects/{self.project}/regions/{region}"
            raise ApiError(404, "notFound", f"The resource '{path}' was not found")
        return region_resource(f"{SELF_LINK_BASE}/projects/{self.project}", region, quotas)

    def _wait(self, zone: str, op: str, query: dict[str, str], body: Any) -> JsonDict:
        return self._poll(f"zones/{zone}", op)

    def _region_wait(self, region: str, op: str, query: dict[str, str], body: Any) -> JsonDict:
        return self._poll(f"regions/{region}", op)

    def _poll(self, scope: str, op: str) -> JsonDict:
        operation = self._operations.get(op)
        if operation is None or self._operation_scopes[op] != scope:
            path = f"projects/{self.project}/{scope}/operations/{op}"
            raise ApiError(404, "notFound", f"The resource '{path}' was not found")
        self._pending_polls[op] -= 1
        if self._pending_polls[op] > 0:
            return {**operation, "status": "RUNNING", "progress": 50}
        return operation

    def _instance(self, zone: str, name: str) -> JsonDict:
        instance = self.instances.get((zone, name))
        if instance is None:
            path = instance_path(self.project, zone, name)
            raise ApiError(404, "notFound", f"The resource '{path}' was not found")
        return instance

    def _new_instance(self, zone: str, body: JsonDict) -> JsonDict:
        zone_url = f"{SELF_LINK_BASE}/projects/{self.project}/zones/{zone}"
        instance = {
            **body,
            "kind": "compute#instance",
            "id": str(next(self._ids) * 7919),
            "creationTimestamp": "2024-05-01T12:00:00.000-07:00",
            "status": "RUNNING",
            "zone": zone_url,
            "machineType": f"{SELF_LINK_BASE}/projects/{self.project}/{body['machineType']}",
            "labels": body.get("labels", {}),
            "metadata": metadata(body.get("metadata", {}).get("items", [])),
            "selfLink": f"{zone_url}/instances/{body['name']}",
        }
        self.instances[(zone, body["name"])] = instance
        return instance

    def _new_operation(
        self,
        scope: str,
        operation_type: str,
        name: str | None,
        failure: _InsertFailure | None = None,
    ) -> JsonDict:
        """An operation in ``scope`` (``zones/Z`` or ``regions/R``) on VM ``name``."""
        number = next(self._ids)
        suffix = hashlib.sha1(str(number).encode()).hexdigest()[:8]
        op_name = f"operation-{1714590000000 + number}-{suffix}"
        scope_url = f"{SELF_LINK_BASE}/projects/{self.project}/{scope}"
        operation = {
            "kind": "compute#operation",
            "id": str(number),
            "name": op_name,
            scope.split("/")[0].removesuffix("s"): scope_url,  # "zone" or "region"
            "operationType": operation_type,
            "status": "DONE",
            "progress": 100,
            "insertTime": "2024-05-01T12:00:00.000-07:00",
            "selfLink": f"{scope_url}/operations/{op_name}",
        }
        if name is not None:
            operation["targetLink"] = f"{scope_url}/instances/{name}"
        if failure is not None:
            operation["error"] = {"errors": [{"code": failure.reason, "message": failure.message}]}
            operation.update(httpErrorStatusCode=503, httpErrorMessage="SERVICE UNAVAILABLE")
        self._operations[op_name] = operation
        self._operation_scopes[op_name] = scope
        self._pending_polls[op_name] = self.operation_polls
        if self.operation_polls:
            return {**operation, "status": "RUNNING", "progress": 0}
        return operation


def _zonal_instance(zone: str, name: str, properties: JsonDict) -> JsonDict:
    """The ``instances.insert`` body that bulk insert's ``properties`` make in ``zone``."""
    accelerators = [
        {
            **accelerator,
            "acceleratorType": f"zones/{zone}/acceleratorTypes/{accelerator['acceleratorType']}",
        }
        for accelerator in properties.get("guestAccelerators", [])
    ]
    return {
        **properties,
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/{properties['machineType']}",
        "guestAccelerators": accelerators,
    }
