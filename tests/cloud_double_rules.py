"""The Firebase Rules API of one project, for ``CloudDouble``: rulesets (immutable
source, given a generated name) and releases (a name pointing at a ruleset;
``cloud.firestore`` is the one Firestore enforces).

Like the real API it refuses: a ruleset with no file, a file with no content or
with source that declares no service; a release whose ruleset does not exist, a
second create of a release, a patch whose body is not ``{"release": {...}}`` or
names another release, or that asks to change more than ``rulesetName``; and a
ruleset deleted while a release still names it.

It bills like the real API too. Firebase Rules is a client-based API: with a
user's credentials (``gcloud auth application-default login``) the caller must
name a quota project (``x-goog-user-project``), or it answers 403 with Google's
words and an ``ErrorInfo`` naming the gcloud CLI's own project as consumer; the
quota project named must be one the caller may use (here: the project) with the
API enabled. A service account's calls are billed to its own project and need
no header. Which tokens are a user's, the double knows from ``user_tokens``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

from spotline.infra.localcloud.wire import ApiError, RecordedRequest
from tests.cloud_double_project import PROJECT_NUMBER
from tests.cloud_double_wire import JsonDict

CREATED = "2026-11-23T00:00:00.000000Z"
SERVICE = "firebaserules.googleapis.com"
# The gcloud CLI's OAuth client belongs to this Google project, which Firebase
# Rules will not bill (the consumer its 403 names).
GCLOUD_PROJECT_NUMBER = "764086051850"
# Google's answer, word for word as reported from real projects.
NO_QUOTA_PROJECT = (
    "Your application is authenticating by using local Application Default Credentials. "
    f"The {SERVICE} API requires a quota project, which is not set by default. To learn how "
    "to set your quota project, see "
    "https://cloud.google.com/docs/authentication/adc-troubleshooting/user-creds ."
)


def error_info(reason: str, consumer: str) -> JsonDict:
    return {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "googleapis.com",
        "metadata": {"consumer": consumer, "service": SERVICE},
    }


class RulesApi:
    """``rulesets`` and ``releases``, by full name, as their JSON."""

    def __init__(self, project: str, enabled: set[str]) -> None:
        self.project = project
        self.enabled = enabled  # the project's enabled APIs (Service Usage's)
        self.user_tokens: set[str] = set()  # bearer tokens of users' credentials
        self.rulesets: dict[str, JsonDict] = {}
        self.releases: dict[str, JsonDict] = {}
        self._ids = itertools.count(1)

    def routes(self) -> list[tuple[str, str, Any]]:
        p = r"^/v1/projects/(?P<project>[^/:]+)"
        # A release's id may hold dots and slashes (``cloud.firestore``, ``prod/beta``).
        release = p + r"/releases/(?P<rid>[^:]+)$"
        ruleset = p + r"/rulesets/(?P<sid>[^/:]+)$"
        routes: list[tuple[str, str, Callable[..., JsonDict]]] = [
            ("POST", p + r"/rulesets$", self._create_ruleset),
            ("GET", ruleset, self._get_ruleset),
            ("DELETE", ruleset, self._delete_ruleset),
            ("POST", p + r"/releases$", self._create_release),
            ("GET", release, self._get_release),
            ("PATCH", release, self._patch_release),
            ("DELETE", release, self._delete_release),
        ]
        return [(method, path, self._billed(handler)) for method, path, handler in routes]

    # -- who pays -------------------------------------------------------------------

    def _billed(self, handler: Callable[..., JsonDict]) -> Callable[..., JsonDict]:
        @functools.wraps(handler)
        def answer(request: RecordedRequest, **params: str) -> JsonDict:
            self.check_quota_project(request)
            return handler(request, **params)

        return answer

    def check_quota_project(self, request: RecordedRequest) -> None:
        """Refuse a user's call that names no quota project, or one it may not
        use or where the API is off. Other callers (a service account; none, as
        the doubles take unauthenticated calls) are billed to their own project."""
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if token not in self.user_tokens:
            return
        quota = request.headers.get("x-goog-user-project")
        if not quota:
            gcloud = f"projects/{GCLOUD_PROJECT_NUMBER}"
            raise ApiError(403, NO_QUOTA_PROJECT, details=[error_info("SERVICE_DISABLED", gcloud)])
        if quota != self.project:
            raise ApiError(
                403,
                f"Caller does not have required permission to use project {quota}. Grant the "
                "caller the roles/serviceusage.serviceUsageConsumer role, or a custom role with "
                "the serviceusage.services.use permission, and then retry.",
                details=[error_info("USER_PROJECT_DENIED", f"projects/{quota}")],
            )
        if SERVICE not in self.enabled:
            raise ApiError(
                403,
                f"Firebase Rules API has not been used in project {PROJECT_NUMBER} before or it "
                "is disabled. Enable it, then retry.",
                details=[error_info("SERVICE_DISABLED", f"projects/{PROJECT_NUMBER}")],
            )

    # -- rulesets -------------------------------------------------------------------

    def _create_ruleset(self, request: RecordedRequest) -> JsonDict:
        body = request.body or {}
        files = (body.get("source") or {}).get("files") or []
        if not files:
            raise ApiError(400, "Ruleset source must contain at least one file")
        for file in files:
            content = file.get("content") or ""
            if not file.get("name") or not content:
                raise ApiError(400, f"every source file needs a name and content, not {file}")
            if "service " not in content:
                raise ApiError(400, f"{file['name']}: no service is declared")
        name = f"projects/{self.project}/rulesets/ruleset-{next(self._ids):04d}"
        ruleset = {
            "name": name,
            "source": {"files": [{"name": f["name"], "content": f["content"]} for f in files]},
            "createTime": CREATED,
        }
        self.rulesets[name] = ruleset
        return ruleset

    def _get_ruleset(self, request: RecordedRequest, sid: str) -> JsonDict:
        name = f"projects/{self.project}/rulesets/{sid}"
        if name not in self.rulesets:
            raise ApiError(404, f"Ruleset {name} not found")
        return self.rulesets[name]

    def _delete_ruleset(self, request: RecordedRequest, sid: str) -> JsonDict:
        name = self._get_ruleset(request, sid)["name"]
        users = [r["name"] for r in self.releases.values() if r["rulesetName"] == name]
        if users:
            raise ApiError(400, f"Ruleset {name} is referenced by {users}")
        del self.rulesets[name]
        return {}

    # -- releases -------------------------------------------------------------------

    def _check_release(self, release: JsonDict) -> str:
        """The release's name, once its fields are those of a release of this project
        whose ruleset exists."""
        name = release.get("name") or ""
        if not name.startswith(f"projects/{self.project}/releases/"):
            raise ApiError(400, f"release name {name!r} is not projects/{self.project}/releases/ID")
        extra = set(release) - {"name", "rulesetName", "createTime", "updateTime"}
        if extra:
            raise ApiError(400, f"unknown release fields {sorted(extra)}")
        if release.get("rulesetName") not in self.rulesets:
            raise ApiError(404, f"Ruleset {release.get('rulesetName')!r} does not exist")
        return str(name)

    def _create_release(self, request: RecordedRequest) -> JsonDict:
        body = request.body or {}
        name = self._check_release(body)
        if name in self.releases:
            raise ApiError(409, f"Release {name} already exists")
        release = {"name": name, "rulesetName": body["rulesetName"]}
        self.releases[name] = {**release, "createTime": CREATED, "updateTime": CREATED}
        return self.releases[name]

    def _get_release(self, request: RecordedRequest, rid: str) -> JsonDict:
        name = f"projects/{self.project}/releases/{rid}"
        if name not in self.releases:
            raise ApiError(404, f"Release {name} not found")
        return self.releases[name]

    def _patch_release(self, request: RecordedRequest, rid: str) -> JsonDict:
        current = self._get_release(request, rid)
        body = request.body or {}
        if set(body) - {"release", "updateMask"} or "release" not in body:
            raise ApiError(400, f"the body is {{'release': ..., 'updateMask': ...}}, not {body}")
        mask = body.get("updateMask")
        if mask not in (None, "", "rulesetName", "ruleset_name"):
            raise ApiError(400, f"only rulesetName may change, not {mask!r}")
        if self._check_release(body["release"]) != current["name"]:
            raise ApiError(400, "a release cannot be renamed")
        current.update(rulesetName=body["release"]["rulesetName"], updateTime=CREATED)
        return current

    def _delete_release(self, request: RecordedRequest, rid: str) -> JsonDict:
        name = self._get_release(request, rid)["name"]
        del self.releases[name]
        return {}
