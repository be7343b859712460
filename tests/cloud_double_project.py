"""A bare project's own APIs, for ``CloudDouble``: Service Usage, Resource
Manager (the project and its policy), Firestore Admin (the database), Cloud
Storage (buckets and their policies), IAM (service accounts and their policies),
Pub/Sub's topic and subscription policies, and Cloud Logging's sinks.

Like the real APIs it refuses: a second create of a name; a policy write whose
etag is stale, that grants a role to a service account of the project that does
not exist or to something that is not a principal, or that carries a condition
without version 3 (or on a bucket without uniform access); a sink or a topic
policy on a topic that does not exist; a bucket deleted while it holds objects.
Every grant a policy write adds is kept in ``grants``, for the IAM test.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from spotline.infra.localcloud.wire import ApiError, RecordedRequest
from tests.cloud_double_wire import JsonDict, PubsubSide, enum_value

PROJECT_NUMBER = "123456789012"
OWNER = "user:owner@example.com"
_DATABASE_TYPES = ["DATABASE_TYPE_UNSPECIFIED", "FIRESTORE_NATIVE", "DATASTORE_MODE"]
_MEMBER = re.compile(r"(user|group|serviceAccount|domain):[^\s:]+|allUsers|allAuthenticatedUsers")
_LEGACY = re.compile(r"(projectOwner|projectEditor|projectViewer):[^\s]+")
_PERMISSION = re.compile(r"[a-z][a-zA-Z0-9]*\.[a-zA-Z0-9]+\.[a-zA-Z0-9]+")


@dataclass(frozen=True)
class Grant:
    """One role given to one member on one resource by a policy write."""

    resource: str
    role: str
    member: str
    condition: str = ""


def etag_of(policy: JsonDict) -> str:
    """A base64 etag, as Google's are (a client may send it back decoded and re-encoded)."""
    text = json.dumps(policy.get("bindings", []), sort_keys=True).encode()
    return base64.b64encode(hashlib.sha256(text).digest()[:9]).decode()


class ProjectApis:
    """The resources of one project, by name, as their JSON."""

    def __init__(self, project: str, pubsub: PubsubSide) -> None:
        self.project = project
        self.pubsub = pubsub
        self.enabled: set[str] = set()
        self.databases: dict[str, JsonDict] = {}
        self.buckets: dict[str, JsonDict] = {}
        self.objects: dict[str, set[str]] = {}
        self.accounts: dict[str, JsonDict] = {}
        self.roles: dict[str, JsonDict] = {}  # custom roles, by id
        self.sinks: dict[str, JsonDict] = {}
        # A bare project: its creator owns it.
        self.policies: dict[str, JsonDict] = {
            f"projects/{project}": {
                "version": 1,
                "bindings": [{"role": "roles/owner", "members": [OWNER]}],
            }
        }
        self.grants: list[Grant] = []
        # Errors the next policy writes answer, in order (eventual consistency,
        # a concurrent writer).
        self.refuse_policy_writes: list[ApiError] = []
        self._ids = 0

    def routes(self) -> list[tuple[str, str, Any]]:
        p = r"projects/(?P<project>[^/:]+)"
        return [
            ("GET", rf"^/v1/{p}/services/(?P<service>[^/:]+)$", self._get_service),
            ("POST", rf"^/v1/{p}/services:batchEnable$", self._enable),
            ("GET", rf"^/v3/{p}$", self._get_project),
            ("POST", rf"^/v3/{p}:getIamPolicy$", self._get_policy_project),
            ("POST", rf"^/v3/{p}:setIamPolicy$", self._set_policy_project),
            ("GET", rf"^/v1/{p}/databases/(?P<db>[^/]+)$", self._get_database),
            ("POST", rf"^/v1/{p}/databases$", self._create_database),
            ("DELETE", rf"^/v1/{p}/databases/(?P<db>[^/]+)$", self._delete_database),
            ("GET", rf"^/v1/{p}/serviceAccounts/(?P<email>[^/:]+)$", self._get_account),
            ("POST", rf"^/v1/{p}/serviceAccounts$", self._create_account),
            ("DELETE", rf"^/v1/{p}/serviceAccounts/(?P<email>[^/:]+)$", self._delete_account),
            ("GET", rf"^/v1/{p}/roles/(?P<role>[^/:]+)$", self._get_role),
            ("POST", rf"^/v1/{p}/roles$", self._create_role),
            ("PATCH", rf"^/v1/{p}/roles/(?P<role>[^/:]+)$", self._patch_role),
            ("DELETE", rf"^/v1/{p}/roles/(?P<role>[^/:]+)$", self._delete_role),
            ("POST", rf"^/v1/{p}/roles/(?P<role>[^/:]+):undelete$", self._undelete_role),
            (
                "POST",
                rf"^/v1/{p}/(?P<kind>serviceAccounts|topics|subscriptions)/(?P<rid>[^/:]+)"
                r":(?P<verb>getIamPolicy|setIamPolicy)$",
                self._resource_policy,
            ),
            (
                # Pub/Sub reads a policy with a GET (IAM and Resource Manager, a POST).
                "GET",
                rf"^/v1/{p}/(?P<kind>topics|subscriptions)/(?P<rid>[^/:]+):(?P<verb>getIamPolicy)$",
                self._resource_policy,
            ),
            ("GET", rf"^/v2/{p}/sinks/(?P<sink>[^/]+)$", self._get_sink),
            ("POST", rf"^/v2/{p}/sinks$", self._create_sink),
            ("PUT", rf"^/v2/{p}/sinks/(?P<sink>[^/]+)$", self._update_sink),
            ("DELETE", rf"^/v2/{p}/sinks/(?P<sink>[^/]+)$", self._delete_sink),
        ]

    def storage_routes(self) -> list[tuple[str, str, Any]]:
        """Cloud Storage's JSON API names no project in its paths."""
        b = r"^/storage/v1/b/(?P<bucket>[^/]+)"
        return [
            ("GET", b + "$", self._get_bucket),
            ("POST", r"^/storage/v1/b$", self._create_bucket),
            ("PATCH", b + "$", self._patch_bucket),
            ("DELETE", b + "$", self._delete_bucket),
            ("GET", b + "/o$", self._list_objects),
            ("DELETE", b + "/o/(?P<name>.+)$", self._delete_object),
            ("GET", b + "/iam$", self._get_bucket_policy),
            ("PUT", b + "/iam$", self._set_bucket_policy),
        ]

    def _next(self) -> int:
        self._ids += 1
        return self._ids

    # -- Service Usage ----------------------------------------------------------------

    def _get_service(self, request: RecordedRequest, service: str) -> JsonDict:
        state = "ENABLED" if service in self.enabled else "DISABLED"
        return {"name": f"projects/{PROJECT_NUMBER}/services/{service}", "state": state}

    def _enable(self, request: RecordedRequest) -> JsonDict:
        ids = (request.body or {}).get("serviceIds") or []
        if not ids or len(ids) > 20:
            raise ApiError(400, "batchEnable takes 1 to 20 services")
        self.enabled |= set(ids)
        response = {
            "@type": "type.googleapis.com/google.api.serviceusage.v1.BatchEnableServicesResponse",
            "services": [self._get_service(request, s) for s in ids],
        }
        return {"name": f"operations/acf.{self._next()}", "done": True, "response": response}

    # -- the project and its policy ----------------------------------------------------------

    def _get_project(self, request: RecordedRequest) -> JsonDict:
        return {
            "name": f"projects/{PROJECT_NUMBER}",
            "projectId": self.project,
            "state": "ACTIVE",
        }

    def _get_policy_project(self, request: RecordedRequest) -> JsonDict:
        return self._read_policy(f"projects/{self.project}", request.body)

    def _set_policy_project(self, request: RecordedRequest) -> JsonDict:
        return self._write_policy(f"projects/{self.project}", request.body)

    # -- Firestore's database ----------------------------------------------------------------

    def _get_database(self, request: RecordedRequest, db: str) -> JsonDict:
        name = f"projects/{self.project}/databases/{db}"
        if name not in self.databases:
            raise ApiError(404, f"Project '{self.project}' or database '{db}' does not exist.")
        return self.databases[name]

    def _create_database(self, request: RecordedRequest) -> JsonDict:
        db = request.query.get("databaseId", "")
        name = f"projects/{self.project}/databases/{db}"
        body = dict(request.body or {})
        if name in self.databases:
            raise ApiError(409, f"Database '{db}' already exists.")
        body["type"] = enum_value(body.get("type"), _DATABASE_TYPES)
        if body["type"] != "FIRESTORE_NATIVE" or not body.get("locationId"):
            raise ApiError(400, f"a database needs a type and a location, not {body}")
        body.update(name=name, uid=f"db-{self._next()}")
        self.databases[name] = body
        response = {"@type": "type.googleapis.com/google.firestore.admin.v1.Database", **body}
        return {"name": f"{name}/operations/op-{self._next()}", "done": True, "response": response}

    def _delete_database(self, request: RecordedRequest, db: str) -> JsonDict:
        database = self._get_database(request, db)
        del self.databases[database["name"]]
        response = {"@type": "type.googleapis.com/google.firestore.admin.v1.Database", **database}
        return {
            "name": f"{database['name']}/operations/op-{self._next()}",
            "done": True,
            "response": response,
        }

    # -- service accounts ---------------------------------------------------------------------

    def _get_account(self, request: RecordedRequest, email: str) -> JsonDict:
        if email not in self.accounts:
            raise ApiError(404, f"Unknown service account {email}")
        return self.accounts[email]

    def _create_account(self, request: RecordedRequest) -> JsonDict:
        body = request.body or {}
        account_id = body.get("accountId", "")
        if not re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", account_id):
            raise ApiError(400, f"account id {account_id!r} is not 6-30 a-z, 0-9 and -")
        email = f"{account_id}@{self.project}.iam.gserviceaccount.com"
        if email in self.accounts:
            raise ApiError(409, f"Service account {account_id} already exists within project")
        account = {
            "name": f"projects/{self.project}/serviceAccounts/{email}",
            "email": email,
            "uniqueId": str(10**20 + self._next()),
            **(body.get("serviceAccount") or {}),
        }
        self.accounts[email] = account
        return account

    def _delete_account(self, request: RecordedRequest, email: str) -> JsonDict:
        self._get_account(request, email)
        del self.accounts[email]
        self.policies.pop(f"projects/{self.project}/serviceAccounts/{email}", None)
        return {}

    # -- custom roles ------------------------------------------------------------------------
    # IAM keeps a deleted role for 7 days (``deleted: true``; ``undelete``
    # brings it back) and refuses its id to ``create`` meanwhile.

    def _get_role(self, request: RecordedRequest, role: str) -> JsonDict:
        found = self.roles.get(role)
        if found is None:
            raise ApiError(404, f"Role projects/{self.project}/roles/{role} not found")
        return found

    def _create_role(self, request: RecordedRequest) -> JsonDict:
        body = request.body or {}
        role_id = str(body.get("roleId", ""))
        if not re.fullmatch(r"[a-zA-Z0-9_.]{3,64}", role_id):
            raise ApiError(400, f"role id {role_id!r} is not 3-64 of a-z, A-Z, 0-9, _ and .")
        if role_id in self.roles:
            raise ApiError(409, f"A role named {role_id} in projects/{self.project} already exists")
        role = dict(body.get("role") or {})
        self._check_permissions(role)
        role.update(name=f"projects/{self.project}/roles/{role_id}", etag=f"e{self._next()}")
        self.roles[role_id] = role
        return role

    def _patch_role(self, request: RecordedRequest, role: str) -> JsonDict:
        current = self._get_role(request, role)
        if current.get("deleted"):
            raise ApiError(400, f"role {role} is deleted: undelete it first")
        body = request.body or {}
        mask = request.query.get("updateMask", "")
        self._check_permissions(body)
        for field in (f for f in mask.split(",") if f):
            current[field] = body.get(field)
        current["etag"] = f"e{self._next()}"
        return current

    def _delete_role(self, request: RecordedRequest, role: str) -> JsonDict:
        current = self._get_role(request, role)
        current.update(deleted=True, etag=f"e{self._next()}")
        return current

    def _undelete_role(self, request: RecordedRequest, role: str) -> JsonDict:
        current = self._get_role(request, role)
        current.pop("deleted", None)
        current["etag"] = f"e{self._next()}"
        return current

    @staticmethod
    def _check_permissions(role: JsonDict) -> None:
        bad = [p for p in role.get("includedPermissions", []) if not _PERMISSION.fullmatch(p)]
        if bad:
            raise ApiError(400, f"Permission {bad[0]} is not valid.")

    # -- policies of accounts, topics and subscriptions -------------------------------------------

    def _resource_policy(
        self, request: RecordedRequest, kind: str, rid: str, verb: str
    ) -> JsonDict:
        resource = f"projects/{self.project}/{kind}/{rid}"
        if kind == "serviceAccounts":
            self._get_account(request, rid)
        elif not self.pubsub.exists(resource):
            raise ApiError(404, f"Resource not found (resource={rid}).")
        if verb == "getIamPolicy":
            if kind == "serviceAccounts" and request.content:
                # IAM v1's serviceAccounts.getIamPolicy has no request body (its
                # discovery document): options.requestedPolicyVersion is a query
                # parameter, and a body is refused as Google's REST front end does.
                name = next(iter(request.body or {"": None}), "")
                raise ApiError(
                    400,
                    f'Invalid JSON payload received. Unknown name "{name}": Cannot bind '
                    f"query parameter. Field '{name}' could not be found in request message.",
                )
            version = request.query.get("options.requestedPolicyVersion")
            body = request.body or {"options": {"requestedPolicyVersion": version or 1}}
            return self._read_policy(resource, body)
        return self._write_policy(resource, request.body)

    def _read_policy(self, resource: str, body: Any) -> JsonDict:
        policy = copy.deepcopy(self.policies.get(resource, {"version": 1}))
        policy.setdefault("bindings", [])
        policy["etag"] = etag_of(policy)
        asked = ((body or {}).get("options") or {}).get("requestedPolicyVersion", 1)
        if any(b.get("condition") for b in policy["bindings"]) and int(asked) < 3:
            raise ApiError(400, "the policy has conditions: ask for version 3")
        if not policy["bindings"]:
            del policy["bindings"]
        return policy

    def _write_policy(self, resource: str, body: Any, *, uniform: bool = True) -> JsonDict:
        if self.refuse_policy_writes:
            raise self.refuse_policy_writes.pop(0)
        policy = dict((body or {}).get("policy") or {})
        current = self.policies.get(resource, {"version": 1, "bindings": []})
        if policy.get("etag") and policy["etag"] != etag_of(
            {"bindings": current.get("bindings", [])}
        ):
            raise ApiError(
                409, "There were concurrent policy changes. Retry the read-modify-write."
            )
        problems = []
        for binding in policy.get("bindings", []):
            role = binding.get("role", "")
            if not role.startswith(("roles/", "projects/")):
                problems.append(f"role {role!r}")
            custom = role.removeprefix(f"projects/{self.project}/roles/")
            if role.startswith("projects/") and (self.roles.get(custom) or {"deleted": 1}).get(
                "deleted"
            ):
                problems.append(f"Role {role} does not exist.")
            if binding.get("condition"):
                if int(policy.get("version") or 1) < 3:
                    problems.append("a conditional binding needs policy version 3")
                if not uniform:
                    problems.append("conditions need uniform bucket-level access")
            for member in binding.get("members", []):
                problems += self._member_problems(member)
        if problems:
            raise ApiError(400, "; ".join(problems))
        before = _grants(resource, current)
        stored = {
            "version": int(policy.get("version") or 1),
            "bindings": policy.get("bindings", []),
        }
        self.policies[resource] = stored
        self.grants += [g for g in _grants(resource, stored) if g not in before]
        return {**stored, "etag": etag_of(stored)}

    def _member_problems(self, member: str) -> list[str]:
        if _LEGACY.fullmatch(member):
            return []
        if not _MEMBER.fullmatch(member):
            return [f"{member!r} is not a principal"]
        email = member.split(":", 1)[-1]
        ours = email.endswith(f"@{self.project}.iam.gserviceaccount.com")
        if member.startswith("serviceAccount:") and ours and email not in self.accounts:
            return [f"Service account {email} does not exist."]
        return []

    # -- Cloud Storage ------------------------------------------------------------------------

    def _get_bucket(self, request: RecordedRequest, bucket: str) -> JsonDict:
        if bucket not in self.buckets:
            raise ApiError(404, "The specified bucket does not exist.")
        return self.buckets[bucket]

    def _create_bucket(self, request: RecordedRequest) -> JsonDict:
        body = dict(request.body or {})
        name = body.get("name", "")
        if request.query.get("project") != self.project:
            raise ApiError(400, f"buckets are created in project {self.project}")
        if name in self.buckets:
            raise ApiError(
                409,
                "You already own this bucket. Please select another name.",
            )
        body.update(
            id=name, projectNumber=PROJECT_NUMBER, metageneration="1", kind="storage#bucket"
        )
        self.buckets[name] = body
        self.objects[name] = set()
        # A new bucket's policy: the project's legacy roles.
        self.policies[f"b/{name}"] = {
            "version": 1,
            "bindings": [
                {
                    "role": "roles/storage.legacyBucketOwner",
                    "members": [f"projectOwner:{self.project}", f"projectEditor:{self.project}"],
                },
                {
                    "role": "roles/storage.legacyBucketReader",
                    "members": [f"projectViewer:{self.project}"],
                },
            ],
        }
        return body

    def _patch_bucket(self, request: RecordedRequest, bucket: str) -> JsonDict:
        current = self._get_bucket(request, bucket)
        for key, value in (request.body or {}).items():
            if key in ("iamConfiguration", "lifecycle", "labels"):
                current[key] = value
        current["metageneration"] = str(int(current["metageneration"]) + 1)
        return current

    def _delete_bucket(self, request: RecordedRequest, bucket: str) -> JsonDict:
        self._get_bucket(request, bucket)
        if self.objects.get(bucket):
            raise ApiError(409, "The bucket you tried to delete is not empty.")
        del self.buckets[bucket]
        self.policies.pop(f"b/{bucket}", None)
        return {}

    def _list_objects(self, request: RecordedRequest, bucket: str) -> JsonDict:
        self._get_bucket(request, bucket)
        return {
            "kind": "storage#objects",
            "items": [{"name": n, "bucket": bucket} for n in sorted(self.objects[bucket])],
        }

    def _delete_object(self, request: RecordedRequest, bucket: str, name: str) -> JsonDict:
        self._get_bucket(request, bucket)
        if name not in self.objects[bucket]:
            raise ApiError(404, f"No such object: {bucket}/{name}")
        self.objects[bucket].discard(name)
        return {}

    def _get_bucket_policy(self, request: RecordedRequest, bucket: str) -> JsonDict:
        self._get_bucket(request, bucket)
        version = request.query.get("optionsRequestedPolicyVersion", "1")
        policy = self._read_policy(f"b/{bucket}", {"options": {"requestedPolicyVersion": version}})
        return {"kind": "storage#policy", "resourceId": f"projects/_/buckets/{bucket}", **policy}

    def _set_bucket_policy(self, request: RecordedRequest, bucket: str) -> JsonDict:
        current = self._get_bucket(request, bucket)
        uniform = bool(
            ((current.get("iamConfiguration") or {}).get("uniformBucketLevelAccess") or {}).get(
                "enabled"
            )
        )
        body = {"policy": request.body or {}}
        answer = self._write_policy(f"b/{bucket}", body, uniform=uniform)
        return {"kind": "storage#policy", "resourceId": f"projects/_/buckets/{bucket}", **answer}

    # -- Cloud Logging's sinks ------------------------------------------------------------------

    def _get_sink(self, request: RecordedRequest, sink: str) -> JsonDict:
        if sink not in self.sinks:
            raise ApiError(404, f"Sink {sink} does not exist")
        return self.sinks[sink]

    def _check_sink(self, body: JsonDict) -> None:
        destination = body.get("destination", "")
        topic = destination.removeprefix("pubsub.googleapis.com/")
        if topic == destination or not self.pubsub.exists(topic):
            raise ApiError(400, f"the sink's destination {destination!r} is not an existing topic")

    def _create_sink(self, request: RecordedRequest) -> JsonDict:
        body = dict(request.body or {})
        if body.get("name") in self.sinks:
            raise ApiError(409, f"Sink {body.get('name')} already exists")
        self._check_sink(body)
        if request.query.get("uniqueWriterIdentity", "").lower() == "true":
            writer = (
                f"serviceAccount:service-{PROJECT_NUMBER}@gcp-sa-logging.iam.gserviceaccount.com"
            )
        else:
            writer = "serviceAccount:cloud-logs@system.gserviceaccount.com"
        body["writerIdentity"] = writer
        self.sinks[body["name"]] = body
        return body

    def _update_sink(self, request: RecordedRequest, sink: str) -> JsonDict:
        current = self._get_sink(request, sink)
        body = dict(request.body or {})
        self._check_sink(body)
        current.update(filter=body.get("filter"), destination=body.get("destination"))
        return current

    def _delete_sink(self, request: RecordedRequest, sink: str) -> JsonDict:
        self._get_sink(request, sink)
        del self.sinks[sink]
        return {}


def _grants(resource: str, policy: JsonDict) -> list[Grant]:
    return [
        Grant(resource, b.get("role", ""), m, (b.get("condition") or {}).get("expression", ""))
        for b in policy.get("bindings", [])
        for m in b.get("members", [])
    ]
