"""Zone and region operations, and ``requestId`` dedup, as Compute Engine keeps them.

A mutating call answers an operation. The model does the work when the call
comes; the operation reads RUNNING until it has been polled ``polls`` times
(``operations.wait``), ``delay_s`` has passed since it began, and what it waits
for (``done``: a deleted VM gone) has happened; then DONE, with its error if
the work failed. ``wait`` holds the answer until the operation is done or
``WAIT_S`` has passed, as Compute Engine's does (its limit is two minutes).

A call repeated with the same ``requestId`` within ``request_id_window_s``
(Compute Engine keeps one at least 60 minutes) answers the first call's
operation and does nothing; older ids are forgotten.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from spotline.infra.localcloud.errors import NotFound
from spotline.infra.localcloud.instances import SELF_LINK_BASE

JsonDict = dict[str, Any]
# The longest a local operations.wait holds its answer (Compute Engine: 2 min).
WAIT_S = 2.0
_WAIT_STEP_S = 0.02
REQUEST_ID_WINDOW_S = 3600.0


@dataclass(frozen=True)
class OperationError:
    """What failed inside an operation: ``error.errors[].code`` and the HTTP status."""

    code: str
    message: str
    http_status: int = 503


@dataclass
class _Entry:
    operation: JsonDict
    scope: str  # zones/Z or regions/R
    pending: int  # waits still to come before it may read DONE
    started: float
    done: threading.Event | None


class Operations:
    """The operations of one project.

    Args:
        polls: how many ``wait`` calls it takes to see an operation DONE; 0
            makes the call's own answer DONE (when nothing else holds it).
        delay_s: how long every operation takes at least.
        request_id_window_s: how long a ``requestId`` is remembered.
    """

    def __init__(
        self,
        project: str,
        polls: int = 1,
        *,
        delay_s: float = 0.0,
        request_id_window_s: float = REQUEST_ID_WINDOW_S,
    ) -> None:
        self.project = project
        self.polls = polls
        self.delay_s = delay_s
        self.request_id_window_s = request_id_window_s
        # What an unfinished operation reads: RUNNING, PENDING, or a status a
        # test has Compute Engine add later.
        self.unfinished_status = "RUNNING"
        self._entries: dict[str, _Entry] = {}
        self._by_request_id: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()

    def by_request_id(self, request_id: str | None) -> JsonDict | None:
        """The operation an earlier call with ``request_id`` started, as it reads now."""
        with self._lock:
            self._forget_old_request_ids()
            found = self._by_request_id.get(request_id or "")
            return None if found is None else self._current(found[0])

    def remember(self, request_id: str, operation: JsonDict) -> None:
        """Answer ``operation`` to later calls with ``request_id``."""
        with self._lock:
            self._forget_old_request_ids()
            self._by_request_id[request_id] = (operation["name"], time.monotonic())

    def start(
        self,
        scope: str,
        operation_type: str,
        target: str | None,
        error: OperationError | None = None,
        done: threading.Event | None = None,
    ) -> JsonDict:
        """A new operation in ``scope`` (``zones/Z``, ``regions/R`` or ``global``) on VM
        ``target``; it is not DONE before ``done`` is set, when given."""
        with self._lock:
            number = next(self._ids)
            suffix = hashlib.sha1(str(number).encode()).hexdigest()[:8]
            name = f"operation-{1714590000000 + number}-{suffix}"
            scope_url = f"{SELF_LINK_BASE}/projects/{self.project}/{scope}"
            operation: JsonDict = {
                "kind": "compute#operation",
                "id": str(number),
                "name": name,
                "operationType": operation_type,
                "status": "DONE",
                "progress": 100,
                "insertTime": "2024-05-01T12:00:00.000-07:00",
                "selfLink": f"{scope_url}/operations/{name}",
            }
            if scope != "global":
                operation[scope.split("/")[0].removesuffix("s")] = scope_url  # "zone" or "region"
            if target is not None:
                operation["targetLink"] = f"{scope_url}/instances/{target}"
            if error is not None:
                operation["error"] = {"errors": [{"code": error.code, "message": error.message}]}
                operation["httpErrorStatusCode"] = error.http_status
            self._entries[name] = _Entry(operation, scope, self.polls, time.monotonic(), done)
            return self._current(name)

    def wait(self, scope: str, name: str) -> JsonDict:
        """``operations.wait``: one poll of the operation, answered once it is
        DONE or after ``WAIT_S``.

        Raises:
            NotFound: no such operation in ``scope``.
        """
        deadline = time.monotonic() + WAIT_S
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or entry.scope != scope:
                raise NotFound(f"The resource 'projects/{self.project}/{scope}/operations/{name}'")
            entry.pending -= 1
            if entry.pending > 0:  # only more polls will finish it
                return self._current(name)
        while True:
            with self._lock:
                current = self._current(name)
            if current["status"] == "DONE" or time.monotonic() >= deadline:
                return current
            time.sleep(_WAIT_STEP_S)

    def _current(self, name: str) -> JsonDict:
        entry = self._entries[name]
        running = (
            entry.pending > 0
            or time.monotonic() - entry.started < self.delay_s
            or (entry.done is not None and not entry.done.is_set())
        )
        if running:
            return {**entry.operation, "status": self.unfinished_status, "progress": 0}
        return entry.operation

    def _forget_old_request_ids(self) -> None:
        horizon = time.monotonic() - self.request_id_window_s
        while self._by_request_id:
            oldest, (_, at) = next(iter(self._by_request_id.items()))
            if at >= horizon:
                return
            del self._by_request_id[oldest]
