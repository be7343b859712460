"""A local HTTP double of Secret Manager's ``versions:access`` route, as the
VM agent calls it: it checks the bearer token and the resource path, answers
the secret's payload base64-encoded, and records each request."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from spotline.infra.localcloud.discovery import Contract

CONTRACT = Contract([("secretmanager", "v1")])


class SecretManagerDouble:
    def __init__(self, token: str, secrets: dict[str, bytes]) -> None:
        """``secrets``: value by resource, ``projects/P/secrets/S/versions/V``."""
        self.token = token
        self.secrets = dict(secrets)
        self.requests: list[tuple[str, str]] = []  # (path, Authorization)
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                auth = self.headers.get("Authorization", "")
                double.requests.append((self.path, auth))
                url = urlsplit(self.path)
                refusal = CONTRACT.record("GET", url.path, dict(parse_qsl(url.query)), None, False)
                if refusal is not None:
                    self._answer(
                        refusal.status,
                        {"error": {"code": refusal.status, "message": refusal.message}},
                    )
                    return
                resource = self.path.removeprefix("/v1/").removesuffix(":access")
                if not self.path.startswith("/v1/") or not self.path.endswith(":access"):
                    self._answer(404, {"error": {"code": 404, "message": "no such route"}})
                elif auth != f"Bearer {double.token}":
                    self._answer(401, {"error": {"code": 401, "status": "UNAUTHENTICATED"}})
                elif resource not in double.secrets:
                    self._answer(404, {"error": {"code": 404, "status": "NOT_FOUND"}})
                else:
                    data = base64.b64encode(double.secrets[resource]).decode()
                    self._answer(200, {"name": resource, "payload": {"data": data}})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
