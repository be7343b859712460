"""Cloud Scheduler v1's jobs (get, create, patch), for ``CloudDouble``.

Like Scheduler it refuses a second create of a name, a patch without an update
mask, a cron that is not five fields, a Pub/Sub target in another project or on
a topic that does not exist, and a message with neither data nor attributes.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from spotline.infra.localcloud.wire import ApiError, RecordedRequest
from tests.cloud_double_wire import (
    JsonDict,
    PubsubSide,
    get_path,
    mask_paths,
    set_path,
)

_JOB_MASK = {"description", "schedule", "timeZone", "pubsubTarget"}


class SchedulerApi:
    """The jobs of one project and region, by full name, as their JSON."""

    def __init__(self, project: str, region: str, pubsub: PubsubSide) -> None:
        self.project, self.region = project, region
        self.pubsub = pubsub
        self.jobs: dict[str, JsonDict] = {}

    def routes(self, location: str) -> list[tuple[str, str, Any]]:
        return [
            ("GET", location + r"/jobs/(?P<jid>[^/]+)$", self._get_job),
            ("POST", location + r"/jobs$", self._create_job),
            ("PATCH", location + r"/jobs/(?P<jid>[^/]+)$", self._patch_job),
            ("DELETE", location + r"/jobs/(?P<jid>[^/]+)$", self._delete_job),
        ]

    def _get_job(self, request: RecordedRequest, jid: str) -> JsonDict:
        name = f"projects/{self.project}/locations/{self.region}/jobs/{jid}"
        if name not in self.jobs:
            raise ApiError(404, f"Job not found: {name}")
        return self.jobs[name]

    def _create_job(self, request: RecordedRequest) -> JsonDict:
        job = dict(request.body or {})
        prefix = f"projects/{self.project}/locations/{self.region}/jobs/"
        name = job.get("name", "")
        if not re.fullmatch(re.escape(prefix) + r"[A-Za-z0-9_-]{1,500}", name):
            raise ApiError(400, f"Job name {name!r} is not under {prefix}")
        if name in self.jobs:
            raise ApiError(409, f"Job {name} already exists")
        self._check_job(job, set(_JOB_MASK))
        job["state"] = "ENABLED"
        self.jobs[name] = job
        return job

    def _patch_job(self, request: RecordedRequest, jid: str) -> JsonDict:
        current = self._get_job(request, jid)
        paths = mask_paths(request.query)
        if not paths or not set(paths) <= _JOB_MASK:
            raise ApiError(400, f"update mask {paths} is empty or names unknown fields")
        body = request.body or {}
        self._check_job(body, set(paths))
        for path in paths:
            set_path(current, path, get_path(body, path))
        return current

    def _delete_job(self, request: RecordedRequest, jid: str) -> JsonDict:
        del self.jobs[self._get_job(request, jid)["name"]]
        return {}

    def _check_job(self, job: JsonDict, paths: set[str]) -> None:
        problems = []
        if "schedule" in paths and len(str(job.get("schedule", "")).split()) != 5:
            problems.append(f"schedule {job.get('schedule')!r} is not a unix-cron expression")
        if "timeZone" in paths and not job.get("timeZone"):
            problems.append("no time zone")
        if "pubsubTarget" in paths:
            target = job.get("pubsubTarget") or {}
            topic = target.get("topicName", "")
            if not re.fullmatch(rf"projects/{self.project}/topics/[^/]+", topic):
                problems.append(f"topicName {topic!r} is not a topic of this project")
            elif not self.pubsub.topic_exists(topic):
                problems.append(f"topic {topic} does not exist")
            if not base64.b64decode(target.get("data", "")) and not target.get("attributes"):
                problems.append("a Pub/Sub message needs data or an attribute")
        if problems:
            raise ApiError(400, "; ".join(problems))
