"""The VmHost's control API: its operations as JSON over HTTP on loopback.

``LocalCompute`` is the client. Errors answer a Compute Engine error body, so
the client maps them as it would Compute Engine's.
"""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

if TYPE_CHECKING:
    from infra.localcloud.vm_host import VmHost

log = logging.getLogger(__name__)


class HostError(Exception):
    """An operation the host refuses, with the HTTP code and GCE reason it answers."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message

    def body(self) -> dict[str, Any]:
        error = {"reason": self.reason, "message": self.message, "domain": "global"}
        return {"error": {"code": self.code, "message": self.message, "errors": [error]}}


def str_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HostError(400, "invalid", f"'{what}' must be an object")
    return {str(k): str(v) for k, v in value.items()}


class ControlServer(ThreadingHTTPServer):
    daemon_threads = True
    vm_host: VmHost


class ControlHandler(BaseHTTPRequestHandler):
    server: ControlServer

    def _dispatch(self) -> None:
        method = self.command
        url = urlsplit(self.path)
        parts = [unquote(part) for part in url.path.split("/") if part]
        query = parse_qs(url.query)
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            if not isinstance(body, dict):
                raise HostError(400, "invalid", "The body must be a JSON object.")
            status, answer = 200, _route(self.server.vm_host, method, parts, query, body)
        except HostError as e:
            status, answer = e.code, e.body()
        except ValueError as e:
            status, answer = 400, HostError(400, "parseError", str(e)).body()
        except Exception as e:
            log.exception("%s %s failed", method, self.path)
            status, answer = 500, HostError(500, "internalError", repr(e)).body()
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _dispatch

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def _route(
    host: VmHost, method: str, parts: list[str], query: dict[str, list[str]], body: dict[str, Any]
) -> Any:
    zone = query.get("zone", [None])[-1]
    match method, parts:
        case "POST", ["vms"]:
            return host.insert(body)
        case "POST", ["gangs"]:
            return {"items": host.insert_gang(body.get("nodes") or [], body.get("zones") or [])}
        case "GET", ["vms"]:
            pairs = (label.partition("=") for label in query.get("label", []))
            labels = {key: value for key, _, value in pairs}
            return {"items": host.list(labels)}
        case "GET", ["vms", name]:
            vm = host.get(name, zone)
            if vm is None:
                raise not_found(name)
            return vm
        case "DELETE", ["vms", name]:
            if not host.delete(name, zone):
                raise not_found(name)
            return {}
        case "POST", ["vms", name, "metadata"]:
            return host.set_metadata(name, str_map(body.get("items"), "items"), zone)
        case "POST", ["vms", name, "preempt"]:
            return host.preempt(name, float(body.get("notice_s", 30.0)), zone)
        case "POST", ["vms", name, "freeze"]:
            return host.freeze(name, zone)
        case "POST", ["vms", name, "stop"]:
            return host.shut_down(name, zone)
        case "POST", ["vms", name, "start"]:
            return host.boot(name, zone)
        case "POST", ["vms", name, "kill"]:
            host.kill(name, zone)
            return {}
        case "GET", ["regions", _region, "quotas"]:
            return {"items": host.region_quotas()}
    raise HostError(404, "notFound", f"No route for {method} /{'/'.join(parts)}")


def not_found(name: str) -> HostError:
    return HostError(404, "notFound", f"The resource 'instances/{name}' was not found")
