"""Compute Engine's REST routes over the local model, for the real client library.

Served (``/compute/v1/projects/PROJECT/...``), as ``GceCompute`` sends them:
``zones/Z/instances`` insert (deduped by ``requestId``), get, delete,
``setMetadata`` (fingerprint checked), ``stop``, ``start``;
``aggregated/instances`` with the ``(labels.K = "V") AND ...`` filter;
``regions/R/instances/bulkInsert`` (``minCount``, ``ANY_SINGLE_ZONE``, deduped);
the project itself (``projects.get``, with its global quota ``GPUS_ALL_REGIONS``);
``zones/Z/operations/OP[/wait]``, ``regions/R/operations/OP[/wait]``; and
``regions/R`` with its quotas.

Not Compute Engine, and so on a route prefix of its own
(``/local/v1/projects/PROJECT/zones/Z/instances/NAME/...``): ``preempt``
(body ``{"noticeSeconds": 30}``), ``kill`` and ``freeze``, for ``spotline
preempt`` and the random-preemption chaos; and ``/local/v1/projects/PROJECT/outage``:
POST starts an ``Outage`` (body: its fields in camelCase, ``delaySeconds``),
DELETE ends it; both answer its counts.

Model errors become Compute Engine's answers: 404 ``notFound``, 409
``alreadyExists``, 400 ``resourceNotReady`` / ``invalid`` /
``UNSUPPORTED_OPERATION`` (live migration asked of a VM with GPUs), 412
``conditionNotMet``; a capacity refusal in the HTTP answer or in the
operation's error, as its rule says; a quota refusal in the operation's error
(``QUOTA_EXCEEDED``, 403).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spotline.infra.localcloud import errors
from spotline.infra.localcloud.discovery import Contract
from spotline.infra.localcloud.firewalls import Firewalls
from spotline.infra.localcloud.instances import SELF_LINK_BASE, spec_from_resource
from spotline.infra.localcloud.model import ComputeModel
from spotline.infra.localcloud.operations import OperationError, Operations
from spotline.infra.localcloud.outage import Outage
from spotline.infra.localcloud.paging import aggregated_page
from spotline.infra.localcloud.resource_rules import check_metadata, check_request_id
from spotline.infra.localcloud.wire import ApiError, JsonDict, RecordedRequest, Recorder

COMPUTE_PREFIX = "/compute/v1/projects/"
LOCAL_PREFIX = "/local/v1/projects/"
_PROJECT = r"^/(?P<api>compute|local)/v1/projects/(?P<project>[^/]+)"
_ZONE = _PROJECT + r"/zones/(?P<zone>[^/]+)"
_VM = _ZONE + r"/instances/(?P<name>[^/]+)"
_REGION = _PROJECT + r"/regions/(?P<region>[^/]+)"
_GLOBAL = _PROJECT + r"/global"
LABEL_TERM = re.compile(r'\(?\s*labels\.(?P<key>[\w-]+)\s*=\s*"(?P<value>[^"]*)"\s*\)?')

Route = tuple[str, str, re.Pattern[str], str]
_ROUTES: list[Route] = [
    (method, api, re.compile(pattern), handler)
    for method, api, pattern, handler in [
        ("POST", "compute", _ZONE + r"/instances$", "_insert"),
        ("GET", "compute", _VM + r"$", "_get"),
        ("DELETE", "compute", _VM + r"$", "_delete"),
        ("POST", "compute", _VM + r"/setMetadata$", "_set_metadata"),
        ("POST", "compute", _VM + r"/stop$", "_stop"),
        ("POST", "compute", _VM + r"/start$", "_start"),
        ("GET", "compute", _PROJECT + r"/aggregated/instances$", "_aggregated_list"),
        ("GET", "compute", _ZONE + r"/operations/(?P<op>[^/]+)$", "_zone_operation"),
        ("POST", "compute", _ZONE + r"/operations/(?P<op>[^/]+)/wait$", "_zone_operation"),
        ("POST", "compute", _REGION + r"/instances/bulkInsert$", "_bulk_insert"),
        ("GET", "compute", _REGION + r"/operations/(?P<op>[^/]+)$", "_region_operation"),
        ("POST", "compute", _REGION + r"/operations/(?P<op>[^/]+)/wait$", "_region_operation"),
        ("GET", "compute", _REGION + r"$", "_region"),
        ("GET", "compute", _PROJECT + r"$", "_project"),
        ("POST", "compute", _GLOBAL + r"/firewalls$", "_insert_firewall"),
        ("GET", "compute", _GLOBAL + r"/firewalls$", "_list_firewalls"),
        ("GET", "compute", _GLOBAL + r"/firewalls/(?P<name>[^/]+)$", "_get_firewall"),
        ("DELETE", "compute", _GLOBAL + r"/firewalls/(?P<name>[^/]+)$", "_delete_firewall"),
        ("GET", "compute", _GLOBAL + r"/operations/(?P<op>[^/]+)$", "_global_operation"),
        ("POST", "compute", _GLOBAL + r"/operations/(?P<op>[^/]+)/wait$", "_global_operation"),
        ("POST", "local", _VM + r"/preempt$", "_preempt"),
        ("POST", "local", _VM + r"/kill$", "_kill"),
        ("POST", "local", _VM + r"/freeze$", "_freeze"),
        ("POST", "local", _PROJECT + r"/outage$", "_start_outage"),
        ("DELETE", "local", _PROJECT + r"/outage$", "_end_outage"),
    ]
]


@dataclass
class _Fault:
    method: str
    path_pattern: re.Pattern[str]
    status: int
    reason: str
    times: int


class ComputeApi:
    """Answers Compute Engine's REST requests (and the local chaos routes) from
    ``model``, recording every request in ``recorder``."""

    def __init__(self, model: ComputeModel, operations: Operations) -> None:
        self.model = model
        self.operations = operations
        self.firewalls = Firewalls(model.project)
        # Compute Engine's own definition; the local routes are no Google API.
        self.recorder = Recorder(Contract([("compute", "v1")], ignore=[LOCAL_PREFIX]))
        self._faults: list[_Fault] = []
        self._faults_lock = threading.Lock()
        self.outage: Outage | None = None
        # An aggregated list's page when the caller names no maxResults
        # (Compute Engine's: 500); a test makes it small to see pages.
        self.list_page_size = 500

    def fail_next(
        self,
        method: str,
        path_pattern: str,
        status: int,
        reason: str = "backendError",
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests whose path matches with an error."""
        with self._faults_lock:
            self._faults.append(_Fault(method, re.compile(path_pattern), status, reason, times))

    def handle(self, request: RecordedRequest) -> tuple[int, JsonDict]:
        self.recorder.record(request)
        self._inject_fault(request)
        outage = self.outage if request.path.startswith(COMPUTE_PREFIX) else None
        if outage is None or not outage.hits(request.method, request.path):
            return self._route(request)
        if outage.delay_s == 0:
            raise ApiError(outage.status, f"injected {outage.status}", outage.reason)
        try:
            return self._route(request)
        finally:
            # Done (or refused) already: only the answer is late.
            time.sleep(outage.delay_s)

    def _route(self, request: RecordedRequest) -> tuple[int, JsonDict]:
        for method, api, pattern, handler in _ROUTES:
            match = pattern.match(request.path)
            if method != request.method or match is None or match["api"] != api:
                continue
            params = {k: v for k, v in match.groupdict().items() if k not in ("api", "project")}
            if match["project"] != self.model.project:
                raise ApiError(404, f"The project {match['project']} was not found", "notFound")
            answer: Callable[..., JsonDict] = getattr(self, handler)
            request_id = request.query.get("requestId") if api == "compute" else None
            try:
                if request_id is not None:
                    check_request_id(request_id)
                    earlier = self.operations.by_request_id(request_id)
                    if earlier is not None:
                        return 200, earlier
                result = answer(request, **params)
            except errors.ModelError as error:
                raise _api_error(error) from error
            if request_id is not None and result.get("kind") == "compute#operation":
                self.operations.remember(request_id, result)
            return 200, result
        raise ApiError(404, f"No route for {request.method} {request.path}", "notFound")

    def _inject_fault(self, request: RecordedRequest) -> None:
        with self._faults_lock:
            for fault in self._faults:
                if fault.method == request.method and fault.path_pattern.search(request.path):
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    raise ApiError(fault.status, f"injected {fault.status}", fault.reason)

    # -- instances -----------------------------------------------------------------

    def _insert(self, request: RecordedRequest, zone: str) -> JsonDict:
        spec = spec_from_resource(request.body or {}, zone)
        error = self._refusal(lambda: self.model.create([spec]))
        return self.operations.start(f"zones/{zone}", "insert", spec.name, error)

    def _get(self, request: RecordedRequest, zone: str, name: str) -> JsonDict:
        return self._instance_json(zone, name)

    def _delete(self, request: RecordedRequest, zone: str, name: str) -> JsonDict:
        vm = self.model.delete(name, zone)
        return self.operations.start(f"zones/{zone}", "delete", name, done=vm.gone)

    def _set_metadata(self, request: RecordedRequest, zone: str, name: str) -> JsonDict:
        body = request.body or {}
        pairs = [(str(i["key"]), str(i.get("value", ""))) for i in body.get("items") or []]
        check_metadata(pairs)
        items = dict(pairs)
        self.model.set_metadata(name, zone, items, str(body.get("fingerprint") or ""))
        return self.operations.start(f"zones/{zone}", "setMetadata", name)

    def _stop(self, request: RecordedRequest, zone: str, name: str) -> JsonDict:
        self.model.stop(name, zone)
        return self.operations.start(f"zones/{zone}", "stop", name)

    def _start(self, request: RecordedRequest, zone: str, name: str) -> JsonDict:
        error = self._refusal(lambda: self.model.start(name, zone))
        return self.operations.start(f"zones/{zone}", "start", name, error)

    def _aggregated_list(self, request: RecordedRequest) -> JsonDict:
        wanted = parse_label_filter(request.query.get("filter", ""))
        project = self.model.project
        found = [(f"zones/{vm.zone}", vm.to_json(project)) for vm in self.model.list(wanted)]
        scopes = [f"zones/{zone}" for zones in self.model.zones.values() for zone in zones]
        try:
            query = {"maxResults": str(self.list_page_size), **request.query}
            page = aggregated_page(found, scopes, query, "instances")
        except ValueError as err:
            raise ApiError(400, str(err), "invalid") from err
        return {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{project}/aggregated/instances",
            **page,
            "selfLink": f"{SELF_LINK_BASE}/projects/{project}/aggregated/instances",
        }

    def _bulk_insert(self, request: RecordedRequest, region: str) -> JsonDict:
        body = request.body or {}
        names = list(body.get("perInstanceProperties") or {})
        properties = body.get("instanceProperties") or {}
        locations = (body.get("locationPolicy") or {}).get("locations") or {}
        zones = sorted(
            key.removeprefix("zones/")
            for key, location in locations.items()
            if (location or {}).get("preference") == "ALLOW"
        )
        _check_bulk_insert(region, body, names, zones)
        taken = [(z, n) for z in zones for n in names if self.model.find(n, z) is not None]
        if taken:
            zone, name = taken[0]
            path = f"projects/{self.model.project}/zones/{zone}/instances/{name}"
            raise ApiError(409, f"The resource '{path}' already exists", "alreadyExists")

        def create() -> None:
            zone = self.model.choose_zone(str(properties.get("machineType") or ""), zones)
            specs = [
                spec_from_resource({**properties, "name": name}, zone, zonal_urls=False)
                for name in names
            ]
            self.model.create(specs)

        error = self._refusal(create)
        return self.operations.start(f"regions/{region}", "bulkInsert", None, error)

    def _region(self, request: RecordedRequest, region: str) -> JsonDict:
        quotas = self.model.region_quotas(region)
        project_url = f"{SELF_LINK_BASE}/projects/{self.model.project}"
        return {
            "kind": "compute#region",
            "id": "1000",
            "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
            "name": region,
            "description": region,
            "status": "UP",
            "zones": [f"{project_url}/zones/{zone}" for zone in self.model.zones[region]],
            "quotas": quotas,
            "selfLink": f"{project_url}/regions/{region}",
            "supportsPzs": False,
        }

    def _project(self, request: RecordedRequest) -> JsonDict:
        project = self.model.project
        return {
            "kind": "compute#project",
            "id": self.model.numeric_project_id,
            "name": project,
            "quotas": self.model.project_quotas(),
            "selfLink": f"{SELF_LINK_BASE}/projects/{project}",
        }

    def _zone_operation(self, request: RecordedRequest, zone: str, op: str) -> JsonDict:
        return self.operations.wait(f"zones/{zone}", op)

    def _region_operation(self, request: RecordedRequest, region: str, op: str) -> JsonDict:
        return self.operations.wait(f"regions/{region}", op)

    # -- firewall rules (global) -------------------------------------------------------

    def _insert_firewall(self, request: RecordedRequest) -> JsonDict:
        name = self.firewalls.insert(request.body)
        return self._global_done("insert", name)

    def _list_firewalls(self, request: RecordedRequest) -> JsonDict:
        return self.firewalls.listing()

    def _get_firewall(self, request: RecordedRequest, name: str) -> JsonDict:
        return self.firewalls.get(name)

    def _delete_firewall(self, request: RecordedRequest, name: str) -> JsonDict:
        self.firewalls.delete(name)
        return self._global_done("delete", name)

    def _global_operation(self, request: RecordedRequest, op: str) -> JsonDict:
        return self.operations.wait("global", op)

    def _global_done(self, verb: str, firewall: str) -> JsonDict:
        operation = self.operations.start("global", verb, None)
        return {**operation, "targetLink": self.firewalls.link(firewall)}

    # -- local chaos -------------------------------------------------------------------

    def _preempt(self, request: RecordedRequest, zone: str, name: str) -> JsonDict:
        notice_s = float((request.body or {}).get("noticeSeconds", 30.0))
        self.model.preempt(name, zone, notice_s)
        return self._instance_json(zone, name, missing_ok=True)

    def _kill(self, request: RecordedRequest, zone: str, name: str) -> JsonDict:
        self.model.kill(name, zone)
        return {}

    def _freeze(self, request: RecordedRequest, zone: str, name: str) -> JsonDict:
        self.model.freeze(name, zone)
        return self._instance_json(zone, name)

    def _start_outage(self, request: RecordedRequest) -> JsonDict:
        body = request.body or {}
        try:
            outage = Outage(
                share=float(body.get("share", 1.0)),
                status=int(body.get("status", 503)),
                reason=str(body.get("reason", "backendError")),
                delay_s=float(body.get("delaySeconds", 0.0)),
                methods=frozenset(str(m).upper() for m in body.get("methods") or ()),
                path_pattern=str(body.get("pathPattern", "")),
                seed=int(body.get("seed", 0)),
            )
        except (TypeError, ValueError, re.error) as err:
            raise ApiError(400, f"Invalid outage: {err}", "invalid") from err
        self.outage = outage
        return _outage_json(outage)

    def _end_outage(self, request: RecordedRequest) -> JsonDict:
        outage, self.outage = self.outage, None
        return {} if outage is None else _outage_json(outage)

    # -- helpers -------------------------------------------------------------------------

    def _instance_json(self, zone: str, name: str, missing_ok: bool = False) -> JsonDict:
        vm = self.model.find(name, zone)
        if vm is None:
            if missing_ok:
                return {}
            path = f"projects/{self.model.project}/zones/{zone}/instances/{name}"
            raise ApiError(404, f"The resource '{path}' was not found", "notFound")
        return vm.to_json(self.model.project)

    @staticmethod
    def _refusal(work: Callable[[], Any]) -> OperationError | None:
        """Do ``work``; a refusal Compute Engine reports in the operation is
        returned as its error, one it answers over HTTP is raised."""
        try:
            work()
        except errors.Refused as refused:
            if refused.status is not None:
                raise ApiError(refused.status, refused.message, refused.reason) from refused
            status = 403 if refused.reason == "QUOTA_EXCEEDED" else 503
            return OperationError(refused.reason, refused.message, status)
        except errors.QuotaExceeded as exceeded:
            return OperationError("QUOTA_EXCEEDED", exceeded.message, 403)
        return None


def _outage_json(outage: Outage) -> JsonDict:
    return {"share": outage.share, "errors": outage.errors, "delayed": outage.delayed}


def _api_error(error: errors.ModelError) -> ApiError:
    """The HTTP answer Compute Engine gives for a model error."""
    match error:
        case errors.NotFound():
            return ApiError(404, error.message, "notFound")
        case errors.AlreadyExists():
            return ApiError(409, error.message, "alreadyExists")
        case errors.NotReady():
            return ApiError(400, error.message, "resourceNotReady")
        case errors.Invalid():
            return ApiError(400, error.message, "invalid")
        case errors.Unsupported():
            return ApiError(400, error.message, "UNSUPPORTED_OPERATION")
        case errors.FingerprintMismatch():
            return ApiError(412, error.message, "conditionNotMet")
        case errors.Refused():
            return ApiError(error.status or 503, error.message, error.reason)
        case errors.QuotaExceeded():
            return ApiError(403, error.message, "QUOTA_EXCEEDED")
    return ApiError(500, error.message, "internalError")


def parse_label_filter(text: str) -> dict[str, str]:
    """Labels a filter like ``(labels.a = "x") AND (labels.b = "y")`` requires."""
    if not text.strip():
        return {}
    wanted = {}
    for term in re.split(r"\s+AND\s+", text.strip()):
        match = LABEL_TERM.fullmatch(term.strip())
        if match is None:
            raise ApiError(400, f"Invalid value for field 'filter': {text!r}", "invalid")
        wanted[match["key"]] = match["value"]
    return wanted


def _check_bulk_insert(region: str, body: JsonDict, names: list[str], zones: list[str]) -> None:
    """Refuse, as Compute Engine does, a bulk insert that cannot be made."""
    problems = []
    count = int(body.get("count") or 0)
    if not names or count != len(names) or int(body.get("minCount") or count) > count:
        problems.append(f"count {count} does not match perInstanceProperties {names}")
    if (body.get("locationPolicy") or {}).get("targetShape") != "ANY_SINGLE_ZONE":
        problems.append("the local cloud only knows targetShape ANY_SINGLE_ZONE")
    if not zones or any(not zone.startswith(f"{region}-") for zone in zones):
        problems.append(f"allowed zones {zones} are not zones of {region}")
    if problems:
        raise ApiError(400, "Invalid value for bulkInsert: " + "; ".join(problems), "invalid")
