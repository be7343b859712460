"""A client of the local cloud's chaos routes (preempt, kill, freeze, outage), which are
no part of Compute Engine's API and so have no Google client.

Standard library only: ``spotline preempt`` should not pay for a client library.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from spotline.infra.localcloud.rest_api import LOCAL_PREFIX


class ChaosError(Exception):
    """The local cloud refused (no such VM, not running) or could not be reached."""


class ChaosClient:
    """Chaos on the VMs of ``project`` in the local cloud at ``endpoint``."""

    def __init__(self, endpoint: str, project: str, timeout_s: float = 30.0) -> None:
        self._base = endpoint.rstrip("/") + LOCAL_PREFIX + urllib.parse.quote(project, safe="")
        self._timeout_s = timeout_s

    def preempt(self, zone: str, name: str, notice_s: float = 30.0) -> None:
        """Preempt the VM as Spot does: notice, SIGTERM, SIGKILL after ``notice_s``, delete."""
        self._post(zone, name, "preempt", {"noticeSeconds": notice_s})

    def kill(self, zone: str, name: str) -> None:
        """Kill the VM with no notice: a preemption its agent never sees."""
        self._post(zone, name, "kill", {})

    def freeze(self, zone: str, name: str) -> None:
        """Stop the VM's processes: a hung agent that sends no heartbeat."""
        self._post(zone, name, "freeze", {})

    def start_outage(
        self, share: float = 1.0, status: int = 503, delay_s: float = 0.0, seed: int = 0
    ) -> None:
        """Compute Engine's routes answer ``share`` of requests with ``status``,
        or (``delay_s`` > 0) do the work and answer ``delay_s`` late."""
        body = {"share": share, "status": status, "delaySeconds": delay_s, "seed": seed}
        self._send("POST", "/outage", body, "start an outage")

    def end_outage(self) -> dict[str, Any]:
        """End the outage; how many requests it failed (``errors``) and delayed."""
        return self._send("DELETE", "/outage", {}, "end the outage")

    def _post(self, zone: str, name: str, action: str, body: dict[str, float]) -> None:
        path = f"/zones/{urllib.parse.quote(zone)}/instances/{urllib.parse.quote(name)}/{action}"
        self._send("POST", path, body, f"{action} {name} in {zone}")

    def _send(self, method: str, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        request = urllib.request.Request(
            self._base + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                answer = json.loads(response.read() or b"{}")
                return answer if isinstance(answer, dict) else {}
        except urllib.error.HTTPError as e:
            with e:
                detail = e.read().decode(errors="replace")
            with contextlib.suppress(ValueError, KeyError, TypeError):
                detail = json.loads(detail)["error"]["message"]
            raise ChaosError(f"{what}: {e.code} {detail}") from e
        except (OSError, ValueError) as e:
            raise ChaosError(f"{what}: {e}") from e
