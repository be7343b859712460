"""A local HTTP double of the Cloud Functions v2, Eventarc v1 and Cloud Scheduler
v1 REST APIs, for the real client libraries, recording every request::

    with CloudDouble("acme", "us-central1", pubsub_host=emulator.host) as cloud:
        Deployer(config, endpoints=cloud.endpoints()).run()
        [create] = cloud.requests_to("POST", "/functions")

It serves what ``spotline deploy`` sends: the source upload (``generateUploadUrl``,
then an unauthenticated PUT of the zip to the URL it returns), functions get,
create and patch with their long-running operations, Eventarc's
``triggers.get``, and Scheduler jobs (``cloud_double_scheduler``). Like the real APIs
it refuses a second create of a name, a patch without an update mask, a source
never uploaded and an event function with a timeout over 540 s, and fails the
build of one whose build service account (``buildConfig.serviceAccount``; a new
project's default when none is named) lacks what a build needs
(``cloud_double_build``), leaving it ``FAILED``; like Eventarc,
each function's trigger gets a Pub/Sub subscription of its own (in the Pub/Sub
emulator, when given). It also holds spotline's own rules: the trigger's topic
is a full resource name that exists, and failed events are retried. A bare
project's own APIs are ``cloud_double_project``'s; Firebase Rules,
``cloud_double_rules``'s.
"""

from __future__ import annotations

import io
import itertools
import re
import threading
import zipfile
from typing import TYPE_CHECKING, Self
from urllib.parse import unquote

from spotline.infra.endpoints import Endpoints
from spotline.infra.localcloud.discovery import Contract
from spotline.infra.localcloud.wire import ApiError, HttpService, RecordedRequest, Recorder
from tests.cloud_double_build import build_account, build_failure
from tests.cloud_double_network import NetworkApi
from tests.cloud_double_project import ProjectApis
from tests.cloud_double_rules import RulesApi
from tests.cloud_double_scheduler import SchedulerApi
from tests.cloud_double_wire import (
    RPC_CODES,
    JsonDict,
    PubsubSide,
    enum_value,
    get_path,
    mask_paths,
    set_path,
)

if TYPE_CHECKING:
    from google.oauth2.credentials import Credentials as UserCredentials

__all__ = ["ApiError", "CloudDouble", "RecordedRequest"]

PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
_RETRY = ["RETRY_POLICY_UNSPECIFIED", "RETRY_POLICY_DO_NOT_RETRY", "RETRY_POLICY_RETRY"]
_ENVIRONMENTS = ["ENVIRONMENT_UNSPECIFIED", "GEN_1", "GEN_2"]
_FUNCTION_ID = re.compile(r"[a-z](?:[a-z0-9-]{2,61}[a-z0-9])")
_FUNCTION_MASK = {
    "buildConfig.source",
    "buildConfig.runtime",
    "buildConfig.entryPoint",
    "buildConfig.serviceAccount",
    "serviceConfig.timeoutSeconds",
    "serviceConfig.availableMemory",
    "serviceConfig.environmentVariables",
    "serviceConfig.serviceAccountEmail",
    "eventTrigger",
    "labels",
    "description",
}
# The published definitions of every API the double serves (a signed upload
# URL is none of them).
API_DEFINITIONS = [
    ("cloudfunctions", "v2"),
    ("eventarc", "v1"),
    ("cloudscheduler", "v1"),
    ("serviceusage", "v1"),
    ("cloudresourcemanager", "v3"),
    ("firestore", "v1"),
    ("iam", "v1"),
    ("pubsub", "v1"),
    ("logging", "v2"),
    ("storage", "v1"),
    ("firebaserules", "v1"),
    ("compute", "v1"),  # the spotline network and its firewall rules
]
_UPLOAD_BUCKET = "gcf-v2-uploads-000000000000.us-central1.cloudfunctions.appspot.com"


class CloudDouble:
    """The three APIs for one project and region, on ``127.0.0.1`` and a free port.

    Args:
        project, region: the only ones the double knows.
        pubsub_host: the Pub/Sub emulator (``host:port``): trigger topics must
            exist there, and each trigger's subscription is made there. Without
            it, ``pubsub.topics`` lists the topics that exist.
        operation_polls: how many operation gets it takes to see one done.

    Attributes:
        functions, jobs, triggers: the resources, by full name, as their JSON.
        uploads: the zips PUT to upload URLs, by object name.
    """

    def __init__(
        self,
        project: str,
        region: str,
        *,
        pubsub_host: str | None = None,
        operation_polls: int = 1,
    ) -> None:
        self.project, self.region = project, region
        self.pubsub = PubsubSide(pubsub_host)
        self.operation_polls = operation_polls
        self.scheduler = SchedulerApi(project, region, self.pubsub)
        self.jobs = self.scheduler.jobs
        self.project_apis = ProjectApis(project, self.pubsub)
        self.rules = RulesApi(project, self.project_apis.enabled)
        self.network = NetworkApi(project, self.project_apis.accounts)
        self.functions: dict[str, JsonDict] = {}
        self.triggers: dict[str, JsonDict] = {}
        self.uploads: dict[str, bytes] = {}
        self._granted: set[str] = set()  # upload objects handed out, not yet PUT
        # Answers to the next PUTs of a source, in turn, before the upload is taken.
        self.refuse_uploads: list[ApiError] = []
        self._operations: dict[str, tuple[JsonDict, int]] = {}
        self._recorder = Recorder(Contract(API_DEFINITIONS, ignore=["/upload/"]))
        self._service = HttpService(self)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        location = r"^/v[12]/projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)"
        routes = [
            ("POST", location + r"/functions:generateUploadUrl$", self._upload_url),
            ("GET", location + r"/functions/(?P<fid>[^/:]+)$", self._get_function),
            ("POST", location + r"/functions$", self._create_function),
            ("PATCH", location + r"/functions/(?P<fid>[^/:]+)$", self._patch_function),
            ("DELETE", location + r"/functions/(?P<fid>[^/:]+)$", self._delete_function),
            ("GET", location + r"/operations/(?P<op>[^/]+)$", self._get_operation),
            ("GET", location + r"/triggers/(?P<tid>[^/]+)$", self._get_trigger),
            *self.scheduler.routes(location),
            *self.project_apis.routes(),
            *self.project_apis.storage_routes(),
            *self.rules.routes(),
            *self.network.routes(),
        ]
        self._routes = [(method, re.compile(path), handler) for method, path, handler in routes]

    # -- lifecycle and inspection ------------------------------------------------

    def start(self) -> Self:
        self._service.start()
        return self

    def stop(self) -> None:
        self._service.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return self._service.endpoint

    def endpoints(self) -> Endpoints:
        """The same double for every API."""
        return Endpoints.everywhere(self.endpoint)

    def user_credentials(self) -> UserCredentials:
        """A person's Application Default Credentials as ``gcloud auth
        application-default login`` writes them: no quota project. Every API of
        the double takes their token; those that bill the caller know it as a user's."""
        from google.oauth2.credentials import Credentials

        token = f"ya29.user-{next(self._ids)}"
        self.rules.user_tokens.add(token)
        return Credentials(token=token)

    @property
    def requests(self) -> list[RecordedRequest]:
        return self._recorder.requests

    def requests_to(self, method: str, path_suffix: str) -> list[RecordedRequest]:
        return self._recorder.requests_to(method, path_suffix)

    def writes(self) -> list[RecordedRequest]:
        """Every request that could change something (reading a policy is a POST)."""
        return [
            r for r in self.requests if r.method != "GET" and not r.path.endswith(":getIamPolicy")
        ]

    def handle(self, request: RecordedRequest) -> tuple[int, JsonDict]:
        self._recorder.record(request)
        with self._lock:
            try:
                return 200, self._answer(request)
            except ApiError as error:
                return error.status, error.body

    def _answer(self, request: RecordedRequest) -> JsonDict:
        if request.method == "PUT" and request.path.startswith("/upload/"):
            return self._put_upload(request)
        path = unquote(request.path)
        for method, pattern, handler in self._routes:
            match = pattern.match(path)
            if method == request.method and match:
                params = match.groupdict()
                if params.pop("project", self.project) != self.project:
                    raise ApiError(404, f"{request.path}: unknown project")
                if params.pop("region", self.region) != self.region:
                    raise ApiError(404, f"{request.path}: unknown location")
                result: JsonDict = handler(request, **params)
                return result
        raise ApiError(404, f"no route for {request.method} {request.path}")

    # -- source upload -------------------------------------------------------------

    def _upload_url(self, request: RecordedRequest) -> JsonDict:
        if enum_value((request.body or {}).get("environment"), _ENVIRONMENTS) != "GEN_2":
            raise ApiError(400, "the double only uploads 2nd gen sources")
        name = f"{self.project}-{next(self._ids):04d}.zip"
        self._granted.add(name)
        return {
            "uploadUrl": f"{self.endpoint}/upload/{_UPLOAD_BUCKET}/{name}?X-Goog-Signature=0f",
            "storageSource": {"bucket": _UPLOAD_BUCKET, "object": name},
        }

    def _put_upload(self, request: RecordedRequest) -> JsonDict:
        name = request.path.rsplit("/", 1)[-1]
        if self.refuse_uploads:
            raise self.refuse_uploads.pop(0)
        if name not in self._granted:
            raise ApiError(403, f"no upload URL was generated for {name}")
        if "authorization" in request.headers:
            raise ApiError(403, "a signed URL takes no credentials")
        if request.headers.get("content-type") != "application/zip":
            raise ApiError(400, "content-type must be application/zip")
        try:
            names = zipfile.ZipFile(io.BytesIO(request.content)).namelist()
        except zipfile.BadZipFile as err:
            raise ApiError(400, f"not a zip: {err}") from err
        if not {"main.py", "requirements.txt"} <= set(names):
            raise ApiError(400, "the archive needs main.py and requirements.txt at its root")
        self._granted.discard(name)
        self.uploads[name] = request.content
        return {}

    # -- functions -----------------------------------------------------------------

    def _function_name(self, fid: str) -> str:
        return f"projects/{self.project}/locations/{self.region}/functions/{fid}"

    def _get_function(self, request: RecordedRequest, fid: str) -> JsonDict:
        function = self.functions.get(self._function_name(fid))
        if function is None:
            raise ApiError(404, f"Resource '{self._function_name(fid)}' was not found")
        return function

    def _create_function(self, request: RecordedRequest) -> JsonDict:
        fid = request.query.get("functionId", "")
        name = self._function_name(fid)
        if not _FUNCTION_ID.fullmatch(fid):
            raise ApiError(400, f"Invalid function id {fid!r}")
        body = dict(request.body or {})
        body.pop("name", None)
        self._check_function(body, set(_FUNCTION_MASK))
        builder = build_account(self.project_apis, get_path(body, "buildConfig.serviceAccount"))
        if name in self.functions:
            return self._new_operation(name, "create", error=("ALREADY_EXISTS", name))
        number = next(self._ids)
        body["name"] = name
        body["environment"] = "GEN_2"
        body["state"] = "ACTIVE"
        body["url"] = f"https://{self.region}-{self.project}.cloudfunctions.net/{fid}"
        service = body.setdefault("serviceConfig", {})
        service["uri"] = f"https://{fid}-{number:06d}-uc.a.run.app"
        service["service"] = f"projects/{self.project}/locations/{self.region}/services/{fid}"
        trigger = body["eventTrigger"]
        trigger["retryPolicy"] = enum_value(trigger.get("retryPolicy"), _RETRY)
        trigger["trigger"] = self._new_trigger(fid, number, trigger["pubsubTopic"])
        self.functions[name] = body
        failure = build_failure(self.project_apis, self.region, fid, builder)
        if failure is not None:
            body["state"] = "FAILED"
            return self._new_operation(name, "create", error=("INTERNAL", failure))
        return self._new_operation(name, "create")

    def _patch_function(self, request: RecordedRequest, fid: str) -> JsonDict:
        current = self._get_function(request, fid)
        paths = mask_paths(request.query)
        if not paths or not set(paths) <= _FUNCTION_MASK:
            raise ApiError(400, f"update mask {paths} is empty or names unknown fields")
        body = request.body or {}
        self._check_function(body, set(paths))
        builds = any(path.startswith("buildConfig.") for path in paths)
        named = body if "buildConfig.serviceAccount" in paths else current
        builder = build_account(self.project_apis, get_path(named, "buildConfig.serviceAccount"))
        for path in paths:
            if path == "eventTrigger":
                trigger = dict(body["eventTrigger"], trigger=current["eventTrigger"]["trigger"])
                trigger["retryPolicy"] = enum_value(trigger.get("retryPolicy"), _RETRY)
                current["eventTrigger"] = trigger
            else:
                set_path(current, path, get_path(body, path))
        if builds:
            failure = build_failure(self.project_apis, self.region, fid, builder)
            current["state"] = "ACTIVE" if failure is None else "FAILED"
            if failure is not None:
                return self._new_operation(current["name"], "update", error=("INTERNAL", failure))
        return self._new_operation(current["name"], "update")

    def _delete_function(self, request: RecordedRequest, fid: str) -> JsonDict:
        """Gone with its trigger and the trigger's subscription, as Eventarc's are."""
        current = self._get_function(request, fid)
        trigger = self.triggers.pop(current["eventTrigger"]["trigger"], None)
        if trigger is not None:
            self.pubsub.delete(trigger["transport"]["pubsub"]["subscription"])
        operation = self._new_operation(current["name"], "delete")
        del self.functions[current["name"]]
        return operation

    def _check_function(self, body: JsonDict, paths: set[str]) -> None:
        """Refuse what the API (or spotline) would not run; only ``paths`` are read."""
        problems = []
        if "buildConfig.source" in paths:
            storage = get_path(body, "buildConfig.source.storageSource") or {}
            if storage.get("object") not in self.uploads:
                problems.append(f"the source {storage} was never uploaded")
            elif "buildConfig.entryPoint" in paths:
                main = zipfile.ZipFile(io.BytesIO(self.uploads[storage["object"]])).read("main.py")
                entry = get_path(body, "buildConfig.entryPoint") or ""
                if not entry or not re.search(rf"\b{re.escape(entry)}\b", main.decode()):
                    problems.append(f"main.py does not define the entry point {entry!r}")
        runtime = get_path(body, "buildConfig.runtime")
        if "buildConfig.runtime" in paths and not re.fullmatch(r"python3\d+", runtime or ""):
            problems.append(f"runtime {runtime!r}")
        timeout = int(get_path(body, "serviceConfig.timeoutSeconds") or 60)
        if "serviceConfig.timeoutSeconds" in paths and timeout > 540:
            problems.append(f"timeout {timeout} s: event-driven functions run at most 540 s")
        if "eventTrigger" in paths:
            problems += self._trigger_problems(body.get("eventTrigger") or {})
        if problems:
            raise ApiError(400, "; ".join(problems))

    def _trigger_problems(self, trigger: JsonDict) -> list[str]:
        problems = []
        if trigger.get("eventType") != PUBLISHED:
            problems.append(f"event type {trigger.get('eventType')!r}")
        topic = trigger.get("pubsubTopic", "")
        if not re.fullmatch(rf"projects/{self.project}/topics/[^/]+", topic):
            problems.append(f"pubsubTopic {topic!r} is not a full topic name of this project")
        elif not self.pubsub.topic_exists(topic):
            problems.append(f"topic {topic} does not exist")
        if enum_value(trigger.get("retryPolicy"), _RETRY) != "RETRY_POLICY_RETRY":
            problems.append("spotline's triggers retry failed events (RETRY_POLICY_RETRY)")
        return problems

    def _new_trigger(self, fid: str, number: int, topic: str) -> str:
        name = f"projects/{self.project}/locations/{self.region}/triggers/{fid}-{number:06d}"
        subscription = (
            f"projects/{self.project}/subscriptions/eventarc-{self.region}-{fid}-{number:06d}-sub-1"
        )
        self.pubsub.create_subscription(subscription, topic)
        self.triggers[name] = {
            "name": name,
            "eventFilters": [{"attribute": "type", "value": PUBLISHED}],
            "transport": {"pubsub": {"topic": topic, "subscription": subscription}},
        }
        return name

    def _get_trigger(self, request: RecordedRequest, tid: str) -> JsonDict:
        name = f"projects/{self.project}/locations/{self.region}/triggers/{tid}"
        if name not in self.triggers:
            raise ApiError(404, f"Resource '{name}' was not found")
        return self.triggers[name]

    # -- operations ----------------------------------------------------------------

    def _new_operation(
        self, target: str, verb: str, error: tuple[str, str] | None = None
    ) -> JsonDict:
        name = f"projects/{self.project}/locations/{self.region}/operations/op-{next(self._ids)}"
        operation: JsonDict = {
            "name": name,
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.functions.v2.OperationMetadata",
                "target": target,
                "verb": verb,
            },
            "done": True,
        }
        if error is not None:
            status, message = error
            operation["error"] = {"code": RPC_CODES[status], "message": f"{message}: {status}"}
        elif verb == "delete":
            operation["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
        else:
            response = {"@type": "type.googleapis.com/google.cloud.functions.v2.Function"}
            operation["response"] = {**response, **self.functions[target]}
        self._operations[name] = (operation, self.operation_polls)
        return {key: value for key, value in operation.items() if key in ("name", "metadata")}

    def _get_operation(self, request: RecordedRequest, op: str) -> JsonDict:
        name = f"projects/{self.project}/locations/{self.region}/operations/{op}"
        if name not in self._operations:
            raise ApiError(404, f"Operation '{name}' was not found")
        operation, polls = self._operations[name]
        self._operations[name] = (operation, polls - 1)
        if polls > 1:
            return {"name": name, "metadata": operation["metadata"], "done": False}
        return operation
