"""A client of the local cloud's chaos routes (preempt, kill, freeze), which are
no part of Compute Engine's API and so have no Google client.

Standard library only: ``spotline preempt`` should not pay for a client library.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request

from infra.localcloud.rest_api import LOCAL_PREFIX


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

    def _post(self, zone: str, name: str, action: str, body: dict[str, float]) -> None:
        path = f"/zones/{urllib.parse.quote(zone)}/instances/{urllib.parse.quote(name)}/{action}"
        request = urllib.request.Request(
            self._base + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s):
                return
        except urllib.error.HTTPError as e:
            with e:
                detail = e.read().decode(errors="replace")
            with contextlib.suppress(ValueError, KeyError, TypeError):
                detail = json.loads(detail)["error"]["message"]
            raise ChaosError(f"{action} {name} in {zone}: {e.code} {detail}") from e
        except OSError as e:
            raise ChaosError(f"{action} {name} in {zone}: {e}") from e
