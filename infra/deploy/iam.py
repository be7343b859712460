"""Who may do what: spotline's service accounts and every IAM binding it grants,
declared once and typed.

``spotline deploy`` grants these bindings, ``spotline destroy`` removes them, and
``tests/unit/test_deploy_iam.py`` fails if any role outside ``Role`` (owner, editor,
compute.admin, ...) appears in them or on the wire. Least privilege:

- the functions' account creates, stops, starts and deletes VMs and reads the
  regions' quotas (``compute.instanceAdmin.v1``), attaches the VM account and no
  other (``iam.serviceAccountUser`` on that account alone), makes and deletes
  each gang attempt's firewall rule (spotline's own role,
  ``custom_roles.GANG_FIREWALLS``: firewall rules and the network's policy,
  not ``compute.securityAdmin``), reads and writes
  Firestore (``datastore.user``), and is the identity its Pub/Sub triggers
  invoke the functions as (``run.invoker``). It publishes on the topics the
  functions publish on (``FUNCTION_TOPICS``) and no other.
- the build account (``spotline-build``) is what Cloud Build builds the
  functions as, named in each function's ``buildConfig.serviceAccount``:
  Google's Cloud Run Builder role on the project (write build logs, fetch the
  uploaded source, push the image) and nothing else. Since 2024 a new project's
  default build account may be one with no roles, whose builds fail; and Google
  recommends a build account of one's own over the functions' runtime account,
  which would otherwise hold both sets of rights (a build runs the
  requirements' installers, the runtime places VMs).
- the VM account publishes on the VM event topics only, reads and writes objects
  under the storage root's ``jobs/`` prefix only (an IAM condition), reads those
  under ``code/`` and ``data/`` (folders uploaded for jobs), and writes logs.
  No Compute, IAM or Firestore right.
- in the per-user mode, each user's VMs run as an account of that user's
  (``user_bindings``; ``spotline.shared.domain.tenancy`` names it): the VM
  account's rights narrowed to the user, objects under ``users/USER/`` only
  (its jobs, and the folders uploaded for them), Secret Manager's
  ``spotline-u-USER_*`` secrets only, publisher on the user's own VM event
  topics (``spotline-epoch-done-u-USER``, ...) only, and the functions'
  account may attach it (and no user may). The shared VM account has no
  right in that mode (``shared_vm_bindings`` says why): a deploy revokes what
  an earlier one granted it, and the users' accounts' publisher on the shared
  VM event topics (``superseded_bindings``).
- the submit and cancel topics take messages from the principals the
  configuration lists, and no one else; in the per-user mode each person's
  principal publishes on that person's own two topics only.
- Pub/Sub's service agent may move a failed event to the dead-letter topic
  (publisher there, subscriber on each trigger's subscription), as dead-lettering
  requires; the preemption log sink's writer publishes on the preempted topic.

Policies travel as their JSON form (``{"bindings": [...], "etag": ...}``), the
one shape every API here (Resource Manager, IAM, Storage, Pub/Sub) shares.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from spotline.infra.deploy import custom_roles
from spotline.shared.domain import tenancy
from spotline.shared.topics import TOPICS, VM_EVENT_KEYS, user_topic

Policy = dict[str, Any]
# Conditions need policy version 3; reading asks for it too, or conditions are hidden.
POLICY_VERSION = 3
_PRINCIPAL = re.compile(r"(user|group|serviceAccount|domain):[^\s:]+")


class Role(StrEnum):
    """Every role spotline grants. Nothing broader may be added (the IAM test)."""

    # Create/delete/stop/start instances, set their metadata, read regions' quotas.
    INSTANCE_ADMIN = "roles/compute.instanceAdmin.v1"
    # Attach one service account to a VM; granted on the VM account only.
    SERVICE_ACCOUNT_USER = "roles/iam.serviceAccountUser"
    # Read and write Firestore documents; no index or database administration.
    DATASTORE_USER = "roles/datastore.user"
    # Eventarc's Pub/Sub triggers call the functions (Cloud Run services) as this.
    RUN_INVOKER = "roles/run.invoker"
    # Publish on one topic; granted per topic.
    PUBLISHER = "roles/pubsub.publisher"
    # Pull from one subscription (Pub/Sub's agent, for dead-lettering).
    SUBSCRIBER = "roles/pubsub.subscriber"
    # Objects' read/write/delete, never the bucket's settings or IAM.
    OBJECT_USER = "roles/storage.objectUser"
    # Objects' read and list only.
    OBJECT_VIEWER = "roles/storage.objectViewer"
    # Write log entries.
    LOG_WRITER = "roles/logging.logWriter"
    # Write metric points (the Ops Agent's, on the VMs).
    METRIC_WRITER = "roles/monitoring.metricWriter"
    # Read a secret's versions; granted on one user's secret names only.
    SECRET_ACCESSOR = "roles/secretmanager.secretAccessor"
    # Build a function from source: write build logs, read the uploaded source,
    # push and clean up the image in Artifact Registry. Project-wide: the
    # gcf-v2-sources bucket and gcf-artifacts repository appear with the first build.
    RUN_BUILDER = "roles/run.builder"


class Scope(StrEnum):
    """The kind of resource a binding is set on."""

    PROJECT = "project"
    SERVICE_ACCOUNT = "service account"
    BUCKET = "bucket"
    TOPIC = "topic"
    SUBSCRIPTION = "subscription"


@dataclass(frozen=True)
class Account:
    """A service account spotline makes."""

    account_id: str
    display_name: str
    description: str

    def email(self, project: str) -> str:
        return f"{self.account_id}@{project}.iam.gserviceaccount.com"


FUNCTIONS_ACCOUNT = Account(
    "spotline-fn",
    "spotline functions",
    "Runs spotline's Cloud Functions: places and removes training VMs, keeps job status.",
)
VM_ACCOUNT = Account(
    "spotline-vm",
    "spotline training VMs",
    "Runs on spotline's Spot VMs: publishes job events, saves checkpoints.",
)
BUILD_ACCOUNT = Account(
    "spotline-build",
    "spotline function builds",
    "Builds spotline's Cloud Functions from source: reads the upload, pushes the image.",
)
ACCOUNTS = (FUNCTIONS_ACCOUNT, VM_ACCOUNT, BUILD_ACCOUNT)
USER_TOPICS = ("submit", "cancel")
# What the functions publish: each job's state changes (``spotline.functions.ops.outbox``)
# and the reaper tick's pages (``spotline.functions.ops.sweep``).
FUNCTION_TOPICS = ("job_events", "reaper_page")


@dataclass(frozen=True)
class Condition:
    title: str
    expression: str
    description: str = ""

    def to_json(self) -> dict[str, str]:
        body = {"title": self.title, "expression": self.expression}
        if self.description:
            body["description"] = self.description
        return body


@dataclass(frozen=True)
class Binding:
    """One role for one principal on one resource."""

    scope: Scope
    resource: str  # the resource's full name (a bucket: its name)
    role: Role | str  # a predefined role, or one of spotline's (``custom_roles``)
    member: str  # user:..., group:..., serviceAccount:...
    why: str
    condition: Condition | None = None

    def __str__(self) -> str:
        where = f" if {self.condition.title}" if self.condition else ""
        short = self.resource.rsplit("/", 1)[-1]
        return f"{self.role.removeprefix('roles/')} to {self.member} on {self.scope} {short}{where}"


@dataclass(frozen=True)
class IamConfig:
    """What the bindings depend on.

    Attributes:
        project: the project id.
        bucket, prefix: the storage root ``gs://bucket/prefix``.
        submitters: the principals who may publish on the shared submit and
            cancel topics.
        user_principals: (user, principal): the principal may publish on that
            user's own submit and cancel topics (the per-user mode).
        functions_account, vm_account: their emails.
    """

    project: str
    bucket: str
    prefix: str
    submitters: tuple[str, ...]
    functions_account: str
    vm_account: str
    user_principals: tuple[tuple[str, str], ...] = ()

    def topic(self, key: str) -> str:
        return f"projects/{self.project}/topics/{TOPICS[key]}"

    @property
    def users(self) -> tuple[str, ...]:
        """The users of the per-user mode, each with VMs of their own account."""
        return tuple(sorted({user for user, _ in self.user_principals}))

    def user_objects(self, user: str) -> str:
        """The object names ``user``'s VMs may touch (``Settings.job_prefix``)."""
        base = f"{self.prefix.strip('/')}/" if self.prefix.strip("/") else ""
        return f"{base}{tenancy.user_prefix(user)}/"

    @property
    def build_account(self) -> str:
        """The email of the account Cloud Build builds the functions as."""
        return BUILD_ACCOUNT.email(self.project)

    @property
    def jobs_prefix(self) -> str:
        """The object names the VMs may touch (``Settings.job_prefix``)."""
        return f"{self.prefix.strip('/')}/jobs/" if self.prefix.strip("/") else "jobs/"


def split_storage_root(root: str) -> tuple[str, str]:
    """``gs://bucket/some/prefix`` -> ``("bucket", "some/prefix")``."""
    bucket, _, prefix = root.removeprefix("gs://").partition("/")
    return bucket, prefix.strip("/")


def principal_problems(principals: Iterable[str]) -> list[str]:
    return [
        f"{p!r} is not a principal (user:, group:, serviceAccount: or domain:)"
        for p in principals
        if not _PRINCIPAL.fullmatch(p)
    ]


def pubsub_agent(project_number: str) -> str:
    """Pub/Sub's service agent, which moves failed events to the dead-letter topic."""
    return f"serviceAccount:service-{project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"


def jobs_condition(config: IamConfig) -> Condition:
    """Objects under ``jobs/`` only. Listing is checked against the bucket
    itself, so the bucket is let through for the role's list permission."""
    objects = f"projects/_/buckets/{config.bucket}/objects/{config.jobs_prefix}"
    return Condition(
        title="spotline jobs prefix",
        expression=(
            f'resource.name.startsWith("{objects}") || '
            'resource.type == "storage.googleapis.com/Bucket"'
        ),
        description="spotline's VMs read and write their jobs' files only",
    )


def user_vm_account(user: str) -> Account:
    """The account ``user``'s VMs run as (the per-user mode)."""
    return Account(
        tenancy.vm_account_id(user),
        f"spotline VMs of {user}"[:100],
        f"Runs {user}'s spotline VMs: publishes their events, saves {user}'s checkpoints.",
    )


def user_condition(config: IamConfig, user: str) -> Condition:
    """Objects under ``users/USER/`` only. Listing is checked against the
    bucket, so it is let through only for a listing of that prefix (the
    ``objectListPrefix`` API attribute, which the client sends as ``prefix``)."""
    names = config.user_objects(user)
    objects = f"projects/_/buckets/{config.bucket}/objects/{names}"
    listed = 'api.getAttribute("storage.googleapis.com/objectListPrefix", "")'
    return Condition(
        title=f"spotline {user} prefix",
        expression=(
            f'resource.name.startsWith("{objects}") || '
            '(resource.type == "storage.googleapis.com/Bucket" && '
            f'{listed}.startsWith("{names}"))'
        ),
        description=f"{user}'s VMs read and write {user}'s files only",
    )


def secret_condition(project_number: str, user: str) -> Condition:
    """Secrets named ``spotline-u-USER_...`` only. Secret Manager names its
    resources by the project's number, and a version's name starts with its
    secret's, so the one test covers both."""
    secrets = f"projects/{project_number}/secrets/{tenancy.secret_prefix(user)}"
    return Condition(
        title=f"spotline {user} secrets",
        expression=f'resource.name.startsWith("{secrets}")',
        description=f"{user}'s VMs read {user}'s secrets only",
    )


def user_bindings(config: IamConfig, project_number: str) -> list[Binding]:
    """Each per-user mode user's VM account and what it may do: the shared VM
    account's rights, each narrowed to the user (objects, secrets); the
    functions' account may attach it to VMs."""
    project = f"projects/{config.project}"
    fn = f"serviceAccount:{config.functions_account}"
    found = []
    for user in config.users:
        email = tenancy.vm_account_email(user, config.project)
        vm = f"serviceAccount:{email}"
        found += [
            Binding(
                Scope.SERVICE_ACCOUNT,
                f"{project}/serviceAccounts/{email}",
                Role.SERVICE_ACCOUNT_USER,
                fn,
                f"gives {user}'s VMs {user}'s account",
            ),
            Binding(Scope.PROJECT, project, Role.LOG_WRITER, vm, "the agent's logs"),
            Binding(Scope.PROJECT, project, Role.METRIC_WRITER, vm, "the Ops Agent's metrics"),
            Binding(
                Scope.PROJECT,
                project,
                Role.SECRET_ACCESSOR,
                vm,
                f"{user}'s jobs' secrets",
                secret_condition(project_number, user),
            ),
            Binding(
                Scope.BUCKET,
                config.bucket,
                Role.OBJECT_USER,
                vm,
                f"{user}'s checkpoints and outputs",
                user_condition(config, user),
            ),
        ]
        # The user's own VM event topics, and no other: the functions take an
        # event about a user's job only through that user's own topic
        # (``identity.vm_event_refusal``), so one user's VMs can neither act
        # on another user's jobs nor crowd their topics.
        found += [
            Binding(
                Scope.TOPIC,
                f"{project}/topics/{user_topic(key, user)}",
                Role.PUBLISHER,
                vm,
                f"{user}'s VM events",
            )
            for key in VM_EVENT_KEYS
        ]
    return found


def uploads_condition(config: IamConfig) -> Condition:
    """Objects under ``code/`` and ``data/``: the folders ``spotline submit
    --code-dir`` uploads by their content's address (infra/client/uploads.py),
    which the VMs read and must not change (another job runs the same ones)."""
    prefix = config.jobs_prefix.removesuffix("jobs/")
    objects = f"projects/_/buckets/{config.bucket}/objects/{prefix}"
    return Condition(
        title="spotline uploaded folders",
        expression=(
            f'resource.name.startsWith("{objects}code/") || '
            f'resource.name.startsWith("{objects}data/") || '
            'resource.type == "storage.googleapis.com/Bucket"'
        ),
        description="spotline's VMs read the code and data folders uploaded for jobs",
    )


def bindings(config: IamConfig) -> list[Binding]:
    """Every binding known before anything is deployed. In the per-user mode
    the shared VM account gets none (``shared_vm_bindings``)."""
    project = f"projects/{config.project}"
    fn = f"serviceAccount:{config.functions_account}"
    build = f"serviceAccount:{config.build_account}"
    found = [
        Binding(Scope.PROJECT, project, Role.INSTANCE_ADMIN, fn, "places and removes VMs"),
        Binding(
            Scope.PROJECT,
            project,
            custom_roles.GANG_FIREWALLS.name(config.project),
            fn,
            "makes and deletes each gang's own firewall rule",
        ),
        Binding(Scope.PROJECT, project, Role.DATASTORE_USER, fn, "keeps job status"),
        Binding(Scope.PROJECT, project, Role.RUN_INVOKER, fn, "its triggers invoke the functions"),
        Binding(Scope.PROJECT, project, Role.RUN_BUILDER, build, "builds the functions"),
    ]
    if not config.users:
        found += shared_vm_bindings(config)
    found += [
        Binding(Scope.TOPIC, config.topic(key), Role.PUBLISHER, fn, "what the functions publish")
        for key in FUNCTION_TOPICS
    ]
    found += [
        Binding(Scope.TOPIC, config.topic(key), Role.PUBLISHER, member, "submits and cancels jobs")
        for key in USER_TOPICS
        for member in config.submitters
    ]
    found += [
        Binding(
            Scope.TOPIC,
            f"projects/{config.project}/topics/{user_topic(key, user)}",
            Role.PUBLISHER,
            member,
            f"{user}'s own {key}s",
        )
        for user, member in config.user_principals
        for key in USER_TOPICS
    ]
    return found


def shared_vm_bindings(config: IamConfig) -> list[Binding]:
    """The shared VM account's rights, and the functions' right to attach it.

    Only the shared-topics mode uses that account. In the per-user mode every
    submit comes through its user's own topic (``identity.refusal``; deploy
    refuses shared-topic submitters with users), so every job's user is one of
    ``users`` and every VM runs as its user's account
    (``tenancy.vm_account``): a grant left on the shared account would be a
    second identity, reading every job's folder, that nothing needs. A deploy
    in the per-user mode revokes them.
    """
    project = f"projects/{config.project}"
    fn = f"serviceAccount:{config.functions_account}"
    vm = f"serviceAccount:{config.vm_account}"
    return [
        Binding(
            Scope.SERVICE_ACCOUNT,
            f"{project}/serviceAccounts/{config.vm_account}",
            Role.SERVICE_ACCOUNT_USER,
            fn,
            "gives VMs the VM account, and no other",
        ),
        Binding(Scope.PROJECT, project, Role.LOG_WRITER, vm, "the agent's logs"),
        Binding(Scope.PROJECT, project, Role.METRIC_WRITER, vm, "the Ops Agent's metrics"),
        Binding(
            Scope.BUCKET,
            config.bucket,
            Role.OBJECT_USER,
            vm,
            "checkpoints and outputs",
            jobs_condition(config),
        ),
        Binding(
            Scope.BUCKET,
            config.bucket,
            Role.OBJECT_VIEWER,
            vm,
            "uploaded code and data",
            uploads_condition(config),
        ),
        *(
            Binding(Scope.TOPIC, config.topic(key), Role.PUBLISHER, vm, "VM events")
            for key in VM_EVENT_KEYS
        ),
    ]


def superseded_bindings(config: IamConfig) -> list[Binding]:
    """What an earlier deploy may have granted that this one does not: in the
    per-user mode, the shared VM account's rights (``shared_vm_bindings``), and
    each user's VM account's publisher on the shared VM event topics (before
    the users had event topics of their own). A deploy revokes them."""
    if not config.users:
        return []
    return [
        *shared_vm_bindings(config),
        *(
            Binding(
                Scope.TOPIC,
                config.topic(key),
                Role.PUBLISHER,
                f"serviceAccount:{tenancy.vm_account_email(user, config.project)}",
                f"{user}'s VM events, before they had topics of their own",
            )
            for user in config.users
            for key in VM_EVENT_KEYS
        ),
    ]


def project_bindings(config: IamConfig, project_number: str) -> list[Binding]:
    """Every binding a deploy grants before the functions' triggers exist."""
    return [
        *bindings(config),
        *user_bindings(config, project_number),
        *dead_letter_bindings(config, project_number),
    ]


def dead_letter_bindings(
    config: IamConfig, project_number: str, subscriptions: Sequence[str] = ()
) -> list[Binding]:
    """Pub/Sub's agent: publisher on the dead-letter topic, subscriber on each
    subscription that dead-letters (known once the functions' triggers exist)."""
    agent = pubsub_agent(project_number)
    topic = config.topic("dead_letter")
    found = [Binding(Scope.TOPIC, topic, Role.PUBLISHER, agent, "dead-lettering")]
    found += [
        Binding(Scope.SUBSCRIPTION, name, Role.SUBSCRIBER, agent, "dead-lettering")
        for name in subscriptions
    ]
    return found


def sink_writer_binding(config: IamConfig, writer_identity: str) -> Binding:
    """The preemption sink's writer publishes Compute Engine's preemption entries."""
    return Binding(
        Scope.TOPIC,
        config.topic("spot_preempted"),
        Role.PUBLISHER,
        writer_identity,
        "routes preemption log entries",
    )


# -- policies -----------------------------------------------------------------------


def _matches(entry: dict[str, Any], binding: Binding) -> bool:
    condition = binding.condition.to_json() if binding.condition else None
    current = entry.get("condition") or None
    if current is not None:
        current = {k: v for k, v in current.items() if v}
    return entry.get("role") == binding.role and current == condition


def missing(policy: Policy, wanted: Iterable[Binding]) -> list[Binding]:
    """The bindings ``policy`` does not grant yet."""
    entries = policy.get("bindings") or []
    return [
        b
        for b in wanted
        if not any(_matches(e, b) and b.member in (e.get("members") or []) for e in entries)
    ]


def present(policy: Policy, ours: Iterable[Binding]) -> list[Binding]:
    """The bindings of ``ours`` that ``policy`` grants."""
    wanted = list(ours)
    absent = missing(policy, wanted)
    return [b for b in wanted if b not in absent]


def with_bindings(policy: Policy, add: Iterable[Binding]) -> Policy:
    """``policy`` with ``add`` granted, everyone else's bindings kept (and the
    etag, so a concurrent change makes the write fail instead of being lost)."""
    updated = copy.deepcopy(policy)
    entries = updated.setdefault("bindings", [])
    for binding in add:
        entry = next((e for e in entries if _matches(e, binding)), None)
        if entry is None:
            entry = {"role": str(binding.role), "members": []}
            if binding.condition:
                entry["condition"] = binding.condition.to_json()
            entries.append(entry)
        if binding.member not in entry["members"]:
            entry["members"] = sorted([*entry["members"], binding.member])
    if any(e.get("condition") for e in entries):
        updated["version"] = POLICY_VERSION
    return updated


def without_bindings(policy: Policy, remove: Iterable[Binding]) -> Policy:
    """``policy`` with ``remove`` revoked; a role left with no member is dropped."""
    updated = copy.deepcopy(policy)
    entries = updated.get("bindings") or []
    for binding in remove:
        for entry in entries:
            if _matches(entry, binding) and binding.member in entry.get("members", []):
                entry["members"] = [m for m in entry["members"] if m != binding.member]
    updated["bindings"] = [e for e in entries if e.get("members")]
    return updated


def by_resource(found: Iterable[Binding]) -> dict[tuple[Scope, str], list[Binding]]:
    """Bindings grouped per resource: one read and at most one write each."""
    grouped: dict[tuple[Scope, str], list[Binding]] = {}
    for binding in found:
        grouped.setdefault((binding.scope, binding.resource), []).append(binding)
    return grouped
