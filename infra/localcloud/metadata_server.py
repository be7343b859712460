"""A Compute Engine metadata server for one local VM.

The VM agent reads its identity and job from ``http://$GCE_METADATA_HOST/computeMetadata/v1/``
and learns of a preemption by a hanging ``instance/preempted?wait_for_change=true``
request, exactly as on Compute Engine. This server answers those paths for one VM:

* every request must carry ``Metadata-Flavor: Google`` (403 otherwise), and every
  answer carries it back;
* every value has an ``ETag``; ``wait_for_change=true`` holds the request until the
  value's ETag differs from ``last_etag`` (default: the ETag when the request came
  in) or ``timeout_sec`` passes, then answers the current value;
* a directory (``instance/attributes/``) lists its keys, one per line, and with
  ``recursive=true`` answers a JSON object;
* ``instance/service-accounts/default/token`` answers a fixed token per VM
  (``access_token``), for local doubles of Google APIs to check.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

PREFIX = "/computeMetadata/v1/"
FLAVOR_HEADER = "Metadata-Flavor"
FLAVOR = "Google"
# Without timeout_sec a real metadata server may hold a request for minutes; bound it
# so that a forgotten watcher cannot pin a thread forever.
MAX_WAIT_S = 300.0

# serve_forever notices shutdown() only between polls; a VM's exit waits on it.
POLL_S = 0.05

Tree = dict[str, Any]


@dataclass(frozen=True)
class Identity:
    """What a VM is, as its metadata server tells it."""

    name: str
    id: str  # numeric, as on Compute Engine
    zone: str  # e.g. "us-central1-a"
    machine_type: str
    project: str
    numeric_project_id: str


def access_token(identity: Identity) -> str:
    """The OAuth token a local VM's service account is given: fixed per VM, so
    that a local double of a Google API (Secret Manager) can check it."""
    return f"ya29.local-{identity.project}-{identity.name}"


def etag(body: str) -> str:
    """The ETag of an answer: a short hash of its body, like Compute Engine's."""
    return hashlib.sha256(body.encode()).hexdigest()[:16]


class MetadataServer:
    """The metadata server of one VM: its identity, attributes and preemption flag.

    ``start()`` binds 127.0.0.1 on a free port and serves from a daemon thread;
    ``host`` is the ``HOST:PORT`` to put in the VM's ``GCE_METADATA_HOST``.
    ``set_attributes`` and ``set_preempted`` wake every matching watcher.
    """

    def __init__(self, identity: Identity, attributes: Mapping[str, str]) -> None:
        self.identity = identity
        self._attributes = dict(attributes)
        self._preempted = False
        self._closed = False
        self._changed = threading.Condition()
        self._server: _HttpServer | None = None
        self._host = ""
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        server = _HttpServer(("127.0.0.1", 0), _Handler)
        server.metadata = self
        self._server = server
        self._host = f"127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            args=(POLL_S,),
            name=f"metadata-{self.identity.name}",
            daemon=True,
        )
        self._thread.start()

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``, for ``GCE_METADATA_HOST``; empty before ``start()``."""
        return self._host

    def close(self) -> None:
        """Stop serving and release every waiting request. Idempotent."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def attributes(self) -> dict[str, str]:
        with self._changed:
            return dict(self._attributes)

    @property
    def preempted(self) -> bool:
        with self._changed:
            return self._preempted

    def set_attributes(self, items: Mapping[str, str]) -> None:
        """Replace the custom metadata, as ``instances.setMetadata`` does."""
        with self._changed:
            self._attributes = dict(items)
            self._changed.notify_all()

    def set_preempted(self) -> None:
        with self._changed:
            self._preempted = True
            self._changed.notify_all()

    def answer(
        self,
        path: str,
        recursive: bool = False,
        wait_for_change: bool = False,
        last_etag: str | None = None,
        timeout_s: float | None = None,
    ) -> tuple[str, str] | None:
        """The (content type, body) for a path below ``PREFIX``, or None if missing.

        With ``wait_for_change`` it blocks until the body's ETag differs from
        ``last_etag`` (or from the current one), the timeout passes, or the server
        closes; a value that disappears meanwhile answers None.
        """
        with self._changed:
            found = self._render(path, recursive)
            if not wait_for_change or found is None:
                return found
            target = last_etag or etag(found[1])
            wait_s = MAX_WAIT_S if timeout_s is None else min(timeout_s, MAX_WAIT_S)
            deadline = time.monotonic() + wait_s
            while found is not None and etag(found[1]) == target and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
                found = self._render(path, recursive)
            return found

    def _tree(self) -> Tree:
        ident = self.identity
        project_path = f"projects/{ident.numeric_project_id}"
        return {
            "instance": {
                "attributes": dict(self._attributes),
                "hostname": f"{ident.name}.{ident.zone}.c.{ident.project}.internal",
                "id": ident.id,
                "machine-type": f"{project_path}/machineTypes/{ident.machine_type}",
                "maintenance-event": "NONE",
                "name": ident.name,
                "preempted": "TRUE" if self._preempted else "FALSE",
                "service-accounts": {
                    "default": {
                        "email": f"spotline-vm@{ident.project}.iam.gserviceaccount.com",
                        "token": json.dumps(
                            {
                                "access_token": access_token(ident),
                                "expires_in": 3599,
                                "token_type": "Bearer",
                            }
                        ),
                    }
                },
                "zone": f"{project_path}/zones/{ident.zone}",
            },
            "project": {
                "numeric-project-id": ident.numeric_project_id,
                "project-id": ident.project,
            },
        }

    def _render(self, path: str, recursive: bool) -> tuple[str, str] | None:
        parts = path.split("/")
        is_directory = parts[-1] == ""
        if is_directory:
            parts = parts[:-1]
        node: Any = self._tree()
        for part in parts:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        if isinstance(node, str):
            return None if is_directory else ("application/text", node)
        if recursive:
            verbatim = bool(parts) and parts[-1] == "attributes"
            return ("application/json", json.dumps(_to_json(node, verbatim), sort_keys=True))
        listing = "".join(
            f"{key}/\n" if isinstance(value, dict) else f"{key}\n"
            for key, value in sorted(node.items())
        )
        return ("application/text", listing)


def _to_json(node: Tree, verbatim: bool) -> Tree:
    # A recursive answer spells keys in camelCase ("machineType"), but never the
    # user's own attribute keys.
    out: Tree = {}
    for key, value in node.items():
        name = key if verbatim else _camel(key)
        out[name] = _to_json(value, key == "attributes") if isinstance(value, dict) else value
    return out


def _camel(key: str) -> str:
    first, *rest = key.split("-")
    return first + "".join(word.capitalize() for word in rest)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    metadata: MetadataServer


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        metadata = cast(_HttpServer, self.server).metadata
        if self.headers.get(FLAVOR_HEADER) != FLAVOR:
            self._send(403, "text/html", "Missing Metadata-Flavor:Google header.\n")
            return
        url = urlsplit(self.path)
        if not url.path.startswith(PREFIX):
            self._send(404, "text/html", "Not Found\n")
            return
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        try:
            timeout_s = float(query["timeout_sec"]) if "timeout_sec" in query else None
        except ValueError:
            self._send(400, "text/html", "Invalid timeout_sec\n")
            return
        found = metadata.answer(
            url.path[len(PREFIX) :],
            recursive=query.get("recursive", "").lower() == "true",
            wait_for_change=query.get("wait_for_change", "").lower() == "true",
            last_etag=query.get("last_etag"),
            timeout_s=timeout_s,
        )
        if found is None:
            self._send(404, "text/html", "Not Found\n")
        else:
            self._send(200, *found)

    def _send(self, status: int, content_type: str, body: str) -> None:
        data = body.encode()
        try:
            self.send_response(status)
            self.send_header(FLAVOR_HEADER, FLAVOR)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            if status == 200:
                self.send_header("ETag", etag(body))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the watcher gave up (its VM is gone): nothing to answer

    def log_message(self, format: str, *args: Any) -> None:
        pass
