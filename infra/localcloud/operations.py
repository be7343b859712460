"""Zone and region operations, and ``requestId`` dedup, as Compute Engine keeps them.

A mutating call answers an operation. The model does the work when the call
comes, and the operation reads RUNNING until it has been polled ``polls``
times (``operations.wait``), then DONE, with its error if the work failed.
A call repeated with the same ``requestId`` answers the first call's operation
and does nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from dataclasses import dataclass
from typing import Any

from spotline.infra.localcloud.errors import NotFound
from spotline.infra.localcloud.instances import SELF_LINK_BASE

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class OperationError:
    """What failed inside an operation: ``error.errors[].code`` and the HTTP status."""

    code: str
    message: str
    http_status: int = 503


class Operations:
    """The operations of one project.

    Args:
        polls: how many ``wait`` calls it takes to see an operation DONE; 0
            makes the call's own answer DONE.
    """

    def __init__(self, project: str, polls: int = 1) -> None:
        self.project = project
        self.polls = polls
        self._operations: dict[str, JsonDict] = {}
        self._scopes: dict[str, str] = {}  # zones/Z or regions/R
        self._pending: dict[str, int] = {}
        self._by_request_id: dict[str, str] = {}
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()

    def by_request_id(self, request_id: str | None) -> JsonDict | None:
        """The operation an earlier call with ``request_id`` started, as it reads now."""
        with self._lock:
            name = self._by_request_id.get(request_id or "")
            return None if name is None else self._current(name)

    def start(
        self,
        scope: str,
        operation_type: str,
        target: str | None,
        error: OperationError | None = None,
        request_id: str | None = None,
    ) -> JsonDict:
        """A new operation in ``scope`` (``zones/Z`` or ``regions/R``) on VM ``target``."""
        with self._lock:
            number = next(self._ids)
            suffix = hashlib.sha1(str(number).encode()).hexdigest()[:8]
            name = f"operation-{1714590000000 + number}-{suffix}"
            scope_url = f"{SELF_LINK_BASE}/projects/{self.project}/{scope}"
            operation: JsonDict = {
                "kind": "compute#operation",
                "id": str(number),
                "name": name,
                scope.split("/")[0].removesuffix("s"): scope_url,  # "zone" or "region"
                "operationType": operation_type,
                "status": "DONE",
                "progress": 100,
                "insertTime": "2024-05-01T12:00:00.000-07:00",
                "selfLink": f"{scope_url}/operations/{name}",
            }
            if target is not None:
                operation["targetLink"] = f"{scope_url}/instances/{target}"
            if error is not None:
                operation["error"] = {"errors": [{"code": error.code, "message": error.message}]}
                operation["httpErrorStatusCode"] = error.http_status
            self._operations[name] = operation
            self._scopes[name] = scope
            self._pending[name] = self.polls
            if request_id:
                self._by_request_id[request_id] = name
            return self._current(name)

    def wait(self, scope: str, name: str) -> JsonDict:
        """``operations.wait``: one poll of the operation.

        Raises:
            NotFound: no such operation in ``scope``.
        """
        with self._lock:
            if self._scopes.get(name) != scope:
                raise NotFound(f"The resource 'projects/{self.project}/{scope}/operations/{name}'")
            self._pending[name] -= 1
            return self._current(name)

    def _current(self, name: str) -> JsonDict:
        operation = self._operations[name]
        if self._pending[name] > 0:
            return {**operation, "status": "RUNNING", "progress": 0}
        return operation
