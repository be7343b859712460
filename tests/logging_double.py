"""A local HTTP double of Cloud Logging's ``entries.list`` (v2 REST), for the real
google-cloud-logging client (``_use_grpc=False``, ``api_endpoint``).

It keeps entries as the API returns them, answers a filter by the job and
attempt it names (``jsonPayload.job_id="J" AND jsonPayload.attempt=N``, the form
``spotline.shared.domain.lifecycle.logs_query`` writes), narrowed by the instance ids
(``resource.labels.instance_id="1"`` or ``=("1" OR "2")``), a node
(``jsonPayload.node=K``) and a start (``timestamp>="..."``) when it names them,
oldest first, and, like the API,
may return fewer entries than ``pageSize``: at most ``PAGE`` a page, with a
``nextPageToken``, so a client that does not follow pages shows too little.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from spotline.infra.localcloud.discovery import Contract
from spotline.infra.localcloud.wire import ApiError, JsonDict, RecordedRequest, Recorder

PAGE = 2


class LoggingDouble(Recorder):
    def __init__(self, entries: list[JsonDict], denied: bool = False) -> None:
        super().__init__(Contract([("logging", "v2")]))
        self.entries = entries
        self.denied = denied  # answer as to a caller without logging.viewer

    def handle(self, request: RecordedRequest) -> tuple[int, JsonDict]:
        self.record(request)
        if (request.method, request.path) != ("POST", "/v2/entries:list"):
            raise ApiError(404, f"no route {request.method} {request.path}")
        if self.denied:
            raise ApiError(403, "Permission 'logging.logEntries.list' denied")
        body: dict[str, Any] = request.body or {}
        if not body.get("resourceNames"):
            raise ApiError(400, "resourceNames: at least one is required")
        job = re.search(r'jsonPayload\.job_id="([^"]*)"', body.get("filter", ""))
        attempt = re.search(r"jsonPayload\.attempt=(\d+)", body.get("filter", ""))
        if job is None or attempt is None:
            raise ApiError(400, "this double answers a job's and an attempt's filter only")
        query = body.get("filter", "")
        ids = re.search(r"resource\.labels\.instance_id=(\([^)]*\)|\"[^\"]*\")", query)
        node = re.search(r"jsonPayload\.node=(\d+)", query)
        since = re.search(r'timestamp>="([^"]*)"', query)
        found = sorted(
            (
                e
                for e in self.entries
                if e["jsonPayload"].get("job_id") == job[1]
                and e["jsonPayload"].get("attempt") == int(attempt[1])
                and (ids is None or f'"{e["resource"]["labels"]["instance_id"]}"' in ids[1])
                and (node is None or e["jsonPayload"].get("node", 0) == int(node[1]))
                and (since is None or _instant(e["timestamp"]) >= _instant(since[1]))
            ),
            key=lambda e: e["timestamp"],
            reverse=body.get("orderBy") == "timestamp desc",
        )
        start = int(body.get("pageToken") or 0)
        page: JsonDict = {"entries": found[start : start + PAGE]}
        if start + PAGE < len(found):
            page["nextPageToken"] = str(start + PAGE)
        return 200, page


def _instant(at: str) -> datetime:
    return datetime.fromisoformat(at.replace("Z", "+00:00"))


def an_entry(
    job_id: str, attempt: int, at: str, message: str, instance_id: str = "1", node: int = 0
) -> JsonDict:
    """One VM log line as Cloud Logging returns it (``at``: RFC 3339, UTC), as
    the Ops Agent makes it from one of the agent's JSON lines."""
    return {
        "logName": "projects/p/logs/spotline-agent",
        "resource": {"type": "gce_instance", "labels": {"instance_id": instance_id}},
        "timestamp": at,
        "insertId": f"{job_id}-{attempt}-{node}-{at}",
        "severity": "INFO",
        "jsonPayload": {"message": message, "job_id": job_id, "attempt": attempt, "node": node},
    }
