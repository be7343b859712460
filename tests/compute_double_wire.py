"""The wire side of ``ComputeDouble``: requests as recorded, errors as Compute
Engine writes them, the HTTP handler, and the checks and grammar of request
fields that the double's routes share.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

JsonDict = dict[str, Any]

# Bulk insert's instance properties take type names, not zonal URLs.
SHORT_NAME = re.compile(r"[a-z0-9-]+")
LABEL_TERM = re.compile(r'\(?\s*labels\.(?P<key>[\w-]+)\s*=\s*"(?P<value>[^"]*)"\s*\)?')


@dataclass(frozen=True)
class RecordedRequest:
    """One request as it reached the double."""

    method: str
    path: str
    query: dict[str, str]  # the last value of each parameter
    body: Any  # the parsed JSON body, or None
    headers: dict[str, str]


class ApiError(Exception):
    """An error answer, in Compute Engine's error body format."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = {
            "error": {
                "code": status,
                "message": message,
                "errors": [{"message": message, "domain": "global", "reason": reason}],
            }
        }


class Answerer(Protocol):
    def handle(self, request: RecordedRequest) -> tuple[int, JsonDict]: ...


class Handler(BaseHTTPRequestHandler):
    """Turns each HTTP request into a ``RecordedRequest`` for ``owner`` to answer."""

    owner: Answerer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        method = self.command
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        headers = {key.lower(): value for key, value in self.headers.items()}
        request = RecordedRequest(method, url.path, query, body, headers)
        status, answer = self.owner.handle(request)
        payload = json.dumps(answer).encode()
        # A client whose timeout ran out has gone; that is its business.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    do_POST = do_DELETE = do_GET


def instance_path(project: str, zone: str, name: str) -> str:
    return f"projects/{project}/zones/{zone}/instances/{name}"


def metadata(items: list[JsonDict]) -> JsonDict:
    digest = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:11]
    return {"kind": "compute#metadata", "fingerprint": digest + "=", "items": items}


def region_resource(
    project_url: str, region: str, quotas: dict[str, tuple[float, float]]
) -> JsonDict:
    """A ``compute#region`` as ``regions.get`` answers it, with these quotas."""
    return {
        "kind": "compute#region",
        "id": "1000",
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": region,
        "description": region,
        "status": "UP",
        "zones": [f"{project_url}/zones/{region}-{zone}" for zone in "abc"],
        "quotas": [
            {"metric": metric, "limit": limit, "usage": usage}
            for metric, (limit, usage) in quotas.items()
        ],
        "selfLink": f"{project_url}/regions/{region}",
        "supportsPzs": False,
    }


def parse_label_filter(text: str) -> dict[str, str]:
    """Labels a filter like ``(labels.a = "x") AND (labels.b = "y")`` requires."""
    if not text.strip():
        return {}
    wanted = {}
    for term in re.split(r"\s+AND\s+", text.strip()):
        match = LABEL_TERM.fullmatch(term.strip())
        if match is None:
            raise ApiError(400, "invalid", f"Invalid value for field 'filter': {text!r}")
        wanted[match["key"]] = match["value"]
    return wanted


def check_bulk_insert(region: str, body: JsonDict, names: list[str], zones: list[str]) -> None:
    """Refuse, as Compute Engine does, what the double cannot create."""
    properties = body.get("instanceProperties", {})
    types = [properties.get("machineType", "")]
    types += [a.get("acceleratorType", "") for a in properties.get("guestAccelerators", [])]
    problems = [
        f"{url!r} is not a short type name" for url in types if not SHORT_NAME.fullmatch(url)
    ]
    count = int(body.get("count", 0))
    if not names or count != len(names) or int(body.get("minCount", count)) > count:
        problems.append(f"count {count} does not match perInstanceProperties {names}")
    if body.get("locationPolicy", {}).get("targetShape") != "ANY_SINGLE_ZONE":
        problems.append("the double only knows targetShape ANY_SINGLE_ZONE")
    if not zones or any(not zone.startswith(f"{region}-") for zone in zones):
        problems.append(f"allowed zones {zones} are not zones of {region}")
    if problems:
        raise ApiError(400, "invalid", "Invalid value for bulkInsert: " + "; ".join(problems))
