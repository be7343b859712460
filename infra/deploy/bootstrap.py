"""The one-time steps of a bare project, made part of ``spotline deploy``.

Each step reads what exists, compares it with what spotline needs, and changes
only the difference; in a dry run it reads and reports what it would change.
In order:

1. the APIs spotline uses, enabled;
2. the Firestore database, ``(default)`` in native mode, if absent, and its
   security rules: deny every client SDK request (``spotline.infra.deploy.rules``);
3. the bucket of the storage root: uniform access, a lifecycle rule that
   deletes old checkpoints;
4. the three service accounts (``spotline.infra.deploy.iam``): the functions',
   the VMs' and the one Cloud Build builds the functions as; in the per-user
   mode, one more per user, which that user's VMs run as;
5. the VMs' network, where a VM is reached by the nodes of its own gang only
   (``spotline.infra.deploy.network``), and the role that lets the functions
   make each gang's rule (``spotline.infra.deploy.custom_roles``);
6. the Cloud Logging sink that routes Compute Engine's preemption entries to the
   preempted topic;
7. the IAM bindings ``spotline.infra.deploy.iam`` declares, per resource: one read, at
   most one write, every other binding kept.

The clients are ``spotline.infra.deploy.clients``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api_exceptions

from spotline.infra.deploy import iam
from spotline.infra.deploy.changes import Change
from spotline.infra.deploy.clients import ProjectClients
from spotline.infra.deploy.custom_roles import CustomRoles
from spotline.infra.deploy.errors import DeployError
from spotline.infra.deploy.network_setup import VmNetwork
from spotline.infra.deploy.rules import FirestoreRules
from spotline.infra.endpoints import Endpoints
from spotline.shared.retries import IAM_PROPAGATION, Backoff, retried

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

    from spotline.infra.deploy.plan import DeployConfig

SERVICES = (
    "compute.googleapis.com",
    "cloudfunctions.googleapis.com",
    "run.googleapis.com",
    "cloudbuild.googleapis.com",
    "artifactregistry.googleapis.com",
    "eventarc.googleapis.com",
    "pubsub.googleapis.com",
    "cloudscheduler.googleapis.com",
    "firestore.googleapis.com",
    "storage.googleapis.com",
    "logging.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "firebaserules.googleapis.com",
    # Jobs' secrets by reference (`sm://NAME` in env): the VMs read them there.
    "secretmanager.googleapis.com",
)
DATABASE = "(default)"
SINK = "spotline-preemptions"
# Compute Engine writes one system-event audit entry per preempted VM.
PREEMPTION_FILTER = (
    'resource.type="gce_instance" AND protoPayload.methodName="compute.instances.preempted"'
)
# A checkpoint older than this belongs to an attempt long replaced.
CHECKPOINT_AGE_DAYS = 30
CHECKPOINT_SUFFIXES = (".pt", ".keras", ".weights.h5")
# What a dry run says instead of what a run does.
WOULD = {
    "created": "would create",
    "updated": "would update",
    "enabled": "would enable",
    "granted": "would grant",
    "revoked": "would revoke",
    "deleted": "would delete",
}


def lifecycle_rule(config: iam.IamConfig) -> dict[str, Any]:
    """Delete old attempts' checkpoints under ``jobs/`` (and each user's folder
    in the per-user mode); outputs are kept."""
    users = [config.user_objects(user) for user in config.users]
    return {
        "action": {"type": "Delete"},
        "condition": {
            "age": CHECKPOINT_AGE_DAYS,
            "matchesPrefix": [config.jobs_prefix, *users],
            "matchesSuffix": list(CHECKPOINT_SUFFIXES),
        },
    }


def sink_destination(config: iam.IamConfig) -> str:
    return f"pubsub.googleapis.com/{config.topic('spot_preempted')}"


def _not_granted_yet(exc: Exception) -> bool:
    """A policy write worth trying again after a re-read: the policy changed
    under it (etag), or IAM does not know a new service account yet."""
    if isinstance(exc, api_exceptions.Conflict | api_exceptions.Aborted):
        return True
    return isinstance(exc, api_exceptions.BadRequest) and "does not exist" in str(exc)


class ProjectSetup:
    """The steps above against ``config``'s project.

    Args:
        config: the deploy configuration (project, region, storage root,
            accounts, submitters).
        endpoints: API endpoint overrides (tests).
        credentials: the deploying user's; Application Default Credentials by default.
        dry_run: read only, and report what would change.
        report: called with each change as it happens.
        grant_backoff: how a policy write is tried again (``IAM_PROPAGATION``).
    """

    def __init__(
        self,
        config: DeployConfig,
        *,
        endpoints: Endpoints | None = None,
        credentials: Credentials | None = None,
        dry_run: bool = False,
        report: Callable[[Change], None] = lambda change: None,
        grant_backoff: Backoff = IAM_PROPAGATION,
    ) -> None:
        self.config = config
        self.iam_config = config.iam_config
        self.endpoints = endpoints or Endpoints()
        self._credentials = credentials
        self.dry_run = dry_run
        self._report = report
        self.grant_backoff = grant_backoff
        self.changes: list[Change] = []
        self.clients = ProjectClients(config.project, self.endpoints, credentials)

    def _record(self, kind: str, name: str, action: str, detail: str = "") -> None:
        if self.dry_run:
            action = WOULD.get(action, action)
        change = Change(kind, name, action, detail)
        self.changes.append(change)
        self._report(change)

    @property
    def project(self) -> str:
        return self.config.project

    # -- 1. APIs -----------------------------------------------------------------------

    def ensure_services(self) -> None:
        from google.cloud import service_usage_v1

        client = self.clients.service_usage
        off = []
        for service in SERVICES:
            name = f"projects/{self.project}/services/{service}"
            got = client.get_service(request=service_usage_v1.GetServiceRequest(name=name))
            if got.state != service_usage_v1.State.ENABLED:
                off.append(service)
        if not off:
            self._record("services", f"{len(SERVICES)} APIs", "unchanged")
            return
        if not self.dry_run:
            request = service_usage_v1.BatchEnableServicesRequest(
                parent=f"projects/{self.project}", service_ids=off
            )
            client.batch_enable_services(request=request).result(timeout=600)
        self._record("services", f"{len(off)} APIs", "enabled", ", ".join(off))

    @cached_property
    def project_number(self) -> str:
        project = self.clients.projects.get_project(name=f"projects/{self.project}")
        return str(project.name.rsplit("/", 1)[-1])

    # -- 2. Firestore --------------------------------------------------------------------

    def ensure_database(self) -> None:
        from google.cloud.firestore_admin_v1.types import Database

        name = f"projects/{self.project}/databases/{DATABASE}"
        try:
            current = self.clients.firestore_admin.get_database(name=name)
        except api_exceptions.NotFound:
            if not self.dry_run:
                database = Database(
                    location_id=self.config.region,
                    type_=Database.DatabaseType.FIRESTORE_NATIVE,
                )
                self.clients.firestore_admin.create_database(
                    parent=f"projects/{self.project}", database=database, database_id=DATABASE
                ).result(timeout=600)
            self._record("database", DATABASE, "created", f"native mode, {self.config.region}")
            return
        if current.type_ != Database.DatabaseType.FIRESTORE_NATIVE:
            raise DeployError(
                f"the project's {DATABASE} database is in {current.type_.name}: spotline "
                "needs Firestore in native mode (a project's mode cannot be changed once used)"
            )
        self._record("database", DATABASE, "unchanged", current.location_id)

    @cached_property
    def network(self) -> VmNetwork:
        """The VMs' network and firewall (``spotline.infra.deploy.network``):
        ``ensure()`` and ``delete()``."""
        return VmNetwork(self.clients, self.iam_config, dry_run=self.dry_run, record=self._record)

    @cached_property
    def custom_roles(self) -> CustomRoles:
        """spotline's own IAM roles (``spotline.infra.deploy.custom_roles``):
        ``ensure()`` and ``delete()``."""
        return CustomRoles(self.clients, self.project, dry_run=self.dry_run, record=self._record)

    @cached_property
    def rules(self) -> FirestoreRules:
        """Firestore's deny-all security rules: ``ensure()`` and ``delete()``."""
        return FirestoreRules(self.clients, dry_run=self.dry_run, record=self._record)

    # -- 3. the bucket --------------------------------------------------------------------

    def ensure_bucket(self) -> None:
        config = self.iam_config
        bucket = self.clients.storage.lookup_bucket(config.bucket)
        rule = lifecycle_rule(config)
        if bucket is None:
            if not self.dry_run:
                bucket = self.clients.storage.bucket(config.bucket)
                bucket.iam_configuration.uniform_bucket_level_access_enabled = True
                bucket.lifecycle_rules = [rule]
                self.clients.storage.create_bucket(bucket, location=self.config.region)
            self._record("bucket", config.bucket, "created", "uniform access, lifecycle rule")
            return
        fields = []
        if not bucket.iam_configuration.uniform_bucket_level_access_enabled:
            bucket.iam_configuration.uniform_bucket_level_access_enabled = True
            fields.append("uniform access")
        rules = list(bucket.lifecycle_rules)
        if rule not in [dict(r) for r in rules]:
            bucket.lifecycle_rules = [*rules, rule]
            fields.append("lifecycle rule")
        if not fields:
            self._record("bucket", config.bucket, "unchanged")
            return
        if not self.dry_run:
            bucket.patch()
        self._record("bucket", config.bucket, "updated", ", ".join(fields))

    # -- 4. service accounts ------------------------------------------------------------------

    def ensure_accounts(self) -> None:
        """Make spotline's accounts; one the configuration names instead must exist."""
        for account, email in self.accounts():
            path = f"projects/{self.project}/serviceAccounts/{email}"
            exists = self.clients.iam_get(path) is not None
            if exists:
                self._record("account", email.split("@")[0], "unchanged", email)
                continue
            if account is None:
                raise DeployError(
                    f"the service account {email} does not exist: create it, or leave the "
                    "option out to let deploy make spotline's own"
                )
            if not self.dry_run:
                body = {
                    "accountId": account.account_id,
                    "serviceAccount": {
                        "displayName": account.display_name,
                        "description": account.description,
                    },
                }
                self.clients.iam_call("POST", f"projects/{self.project}/serviceAccounts", body)
            self._record("account", account.account_id, "created", email)

    def accounts(self) -> list[tuple[iam.Account | None, str]]:
        """(the declared account, or None where another was configured; its email)."""
        config = self.iam_config
        configured = (config.functions_account, config.vm_account, config.build_account)
        found: list[tuple[iam.Account | None, str]] = [
            (account if account.email(self.project) == email else None, email)
            for account, email in zip(iam.ACCOUNTS, configured, strict=True)
        ]
        users = [iam.user_vm_account(user) for user in config.users]
        return found + [(account, account.email(self.project)) for account in users]

    # -- 5. the preemption sink ------------------------------------------------------------------

    def ensure_sink(self) -> str | None:
        """Converge the sink; its writer identity (None in a dry run that would create it)."""
        config = self.iam_config
        sink = self.clients.logging.sink(
            SINK, filter_=PREEMPTION_FILTER, destination=sink_destination(config)
        )
        if not sink.exists():
            if self.dry_run:
                self._record("sink", SINK, "created", f"-> {config.topic('spot_preempted')}")
                return None
            sink.create(unique_writer_identity=True)
            self._record("sink", SINK, "created", f"-> {config.topic('spot_preempted')}")
            return str(sink.writer_identity)
        current = self.clients.logging.sink(SINK)
        current.reload()
        if (current.filter_, current.destination) == (PREEMPTION_FILTER, sink.destination):
            self._record("sink", SINK, "unchanged")
            return str(current.writer_identity)
        if not self.dry_run:
            sink.update(unique_writer_identity=True)
        self._record("sink", SINK, "updated", "filter, destination")
        return str(sink.writer_identity or current.writer_identity)

    # -- 6. IAM bindings ------------------------------------------------------------------------

    def ensure_bindings(self, wanted: Iterable[iam.Binding]) -> None:
        """Grant what is missing, per resource; everyone else's bindings stay."""
        for (scope, resource), group in iam.by_resource(wanted).items():
            policy = self.get_policy(scope, resource)
            short = f"{scope} {resource.rsplit('/', 1)[-1]}"
            absent = iam.missing(policy or {}, group)
            if not absent:
                self._record("iam", short, "unchanged", f"{len(group)} bindings")
                continue
            if not self.dry_run:
                self._grant(scope, resource, policy, absent)
            roles = ", ".join(f"{b.role.removeprefix('roles/')} to {b.member}" for b in absent)
            self._record("iam", short, "granted", roles)

    def _grant(
        self,
        scope: iam.Scope,
        resource: str,
        policy: iam.Policy | None,
        absent: list[iam.Binding],
    ) -> None:
        """Write the policy with ``absent`` granted. Read again and retried: on a
        concurrent change (the etag no longer matches), and while a service
        account made a moment ago is not yet known to IAM (eventual consistency;
        Google's own guides retry this)."""
        tries = 0

        def write() -> None:
            nonlocal policy, absent, tries
            if tries:  # read again: changed under us, or the account now known
                policy = self.get_policy(scope, resource)
                absent = iam.missing(policy or {}, absent)
            tries += 1
            if absent:
                self.set_policy(scope, resource, iam.with_bindings(policy or {}, absent))

        retried(write, _not_granted_yet, self.grant_backoff)

    def revoke_bindings(self, ours: Iterable[iam.Binding]) -> None:
        """Remove spotline's bindings, per resource; everyone else's stay."""
        for (scope, resource), group in iam.by_resource(ours).items():
            policy = self.get_policy(scope, resource)
            short = f"{scope} {resource.rsplit('/', 1)[-1]}"
            there = iam.present(policy or {}, group)
            if not there:
                self._record("iam", short, "absent")
                continue
            if not self.dry_run:
                self.set_policy(scope, resource, iam.without_bindings(policy or {}, there))
            self._record("iam", short, "revoked", f"{len(there)} bindings")

    def get_policy(self, scope: iam.Scope, resource: str) -> iam.Policy | None:
        """The resource's policy as JSON; None when the resource does not exist
        (yet: a dry run on a bare project)."""
        from google.iam.v1 import iam_policy_pb2, options_pb2
        from google.protobuf import json_format

        options = options_pb2.GetPolicyOptions(requested_policy_version=iam.POLICY_VERSION)
        request = iam_policy_pb2.GetIamPolicyRequest(resource=resource, options=options)
        try:
            if scope is iam.Scope.PROJECT:
                policy = self.clients.projects.get_iam_policy(request=request)
            elif scope in (iam.Scope.TOPIC, iam.Scope.SUBSCRIPTION):
                policy = self.clients.pubsub_iam.get_iam_policy(request=request)
            elif scope is iam.Scope.SERVICE_ACCOUNT:
                # A POST without a body: the policy version is a query
                # parameter (IAM v1's discovery document), a body is refused.
                return self.clients.iam_call(
                    "POST",
                    f"{resource}:getIamPolicy",
                    None,
                    missing_ok=True,
                    params={"options.requestedPolicyVersion": str(iam.POLICY_VERSION)},
                )
            else:
                bucket = self.clients.storage.bucket(resource)
                answer = bucket.get_iam_policy(requested_policy_version=iam.POLICY_VERSION)
                return dict(answer.to_api_repr())
        except api_exceptions.NotFound:
            return None
        return dict(json_format.MessageToDict(policy))

    def set_policy(self, scope: iam.Scope, resource: str, policy: iam.Policy) -> None:
        from google.iam.v1 import iam_policy_pb2, policy_pb2
        from google.protobuf import json_format

        if scope is iam.Scope.SERVICE_ACCOUNT:
            self.clients.iam_call("POST", f"{resource}:setIamPolicy", {"policy": policy})
        elif scope is iam.Scope.BUCKET:
            from google.api_core.iam import Policy

            self.clients.storage.bucket(resource).set_iam_policy(Policy.from_api_repr(policy))
        else:
            message = json_format.ParseDict(policy, policy_pb2.Policy())
            request = iam_policy_pb2.SetIamPolicyRequest(resource=resource, policy=message)
            client = (
                self.clients.projects if scope is iam.Scope.PROJECT else self.clients.pubsub_iam
            )
            client.set_iam_policy(request=request)
