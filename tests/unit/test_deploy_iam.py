"""Least privilege, as declared (``spotline.infra.deploy.iam``) and as granted on the wire:
no role broader than spotline's short list appears anywhere. A whole deploy's
grants, on the Pub/Sub emulator: tests/emulators/test_deploy_iam_wire.py."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from google.api_core.exceptions import BadRequest

from spotline.functions.deps import Deps
from spotline.functions.ops.jobs import cancel
from spotline.functions.ops.sweep import tick
from spotline.infra.deploy import custom_roles, iam
from spotline.infra.deploy.bootstrap import ProjectSetup
from spotline.infra.deploy.plan import DeployConfig
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.wire import ApiError
from spotline.shared.adapters.gce_requests import VM_SCOPES
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.adapters.recording_bus import RecordingBus
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.retries import Backoff
from spotline.shared.settings import Settings
from tests.cloud_double import CloudDouble
from tests.documents import T0, job
from tests.local_cloud import client

ROOT = Path(__file__).resolve().parents[2]
# Roles that would let an account (or a leaked VM token) do far more than its job.
BROAD = re.compile(
    r"roles/(owner|editor|viewer|browser"
    r"|compute\.(admin|instanceAdmin)$|compute\.(networkAdmin|securityAdmin|storageAdmin)"
    r"|storage\.(admin|objectAdmin)|pubsub\.(admin|editor)|datastore\.owner"
    r"|iam\.\w*[Aa]dmin|iam\.serviceAccountTokenCreator|resourcemanager\.\w+"
    r"|cloudfunctions\.admin|run\.admin|logging\.admin)\b"
)
ALLOWED = {str(role) for role in iam.Role}
# spotline's own roles may hold these permissions and no other: a firewall
# rule's, for a gang's nodes (spotline.infra.deploy.custom_roles).
CUSTOM_PERMISSIONS = re.compile(
    r"compute\.(firewalls\.(create|delete|get|list)|networks\.updatePolicy)"
)


def allowed(project: str) -> set[str]:
    return ALLOWED | {role.name(project) for role in custom_roles.ROLES}


SUBMITTER = "group:ml-team@example.com"
CONFIG = iam.IamConfig(
    project="acme-ml",
    bucket="acme-spotline",
    prefix="runs",
    submitters=(SUBMITTER,),
    functions_account="spotline-fn@acme-ml.iam.gserviceaccount.com",
    vm_account="spotline-vm@acme-ml.iam.gserviceaccount.com",
)
FN = f"serviceAccount:{CONFIG.functions_account}"
VM = f"serviceAccount:{CONFIG.vm_account}"


def every_binding(config: iam.IamConfig = CONFIG) -> list[iam.Binding]:
    return [
        *iam.bindings(config),
        *iam.dead_letter_bindings(config, "42", ["projects/acme-ml/subscriptions/s-1"]),
        iam.sink_writer_binding(config, "serviceAccount:service-42@gcp-sa-logging.iam..."),
    ]


def test_the_declared_roles_are_none_of_the_broad_ones() -> None:
    assert all(BROAD.search(role) is None for role in ALLOWED), ALLOWED
    assert {str(b.role) for b in every_binding()} <= allowed("acme-ml")
    for role in custom_roles.ROLES:
        assert [p for p in role.permissions if not CUSTOM_PERMISSIONS.fullmatch(p)] == []


def test_the_functions_account_runs_vms_as_the_vm_account_only() -> None:
    mine = [b for b in every_binding() if b.member == FN]

    assert {(b.scope, b.role) for b in mine} == {
        (iam.Scope.PROJECT, iam.Role.INSTANCE_ADMIN),
        (iam.Scope.PROJECT, custom_roles.GANG_FIREWALLS.name("acme-ml")),
        (iam.Scope.PROJECT, iam.Role.DATASTORE_USER),
        (iam.Scope.PROJECT, iam.Role.RUN_INVOKER),
        (iam.Scope.SERVICE_ACCOUNT, iam.Role.SERVICE_ACCOUNT_USER),
        (iam.Scope.TOPIC, iam.Role.PUBLISHER),
    }
    [user] = [b for b in mine if b.role is iam.Role.SERVICE_ACCOUNT_USER]
    assert user.resource == f"projects/acme-ml/serviceAccounts/{CONFIG.vm_account}"


def test_the_functions_account_publishes_where_the_functions_publish_and_nowhere_else(
    cloud: LocalCloud,
) -> None:
    # What the functions really publish: a job's life through the real
    # operations and a reaper tick, with every publish recorded (a missing
    # grant was found only in review: the job-events outbox would have been
    # refused in a project).
    bus = RecordingBus("acme-ml")
    store = InMemoryStore()
    deps = Deps(Settings(project="acme-ml"), store=store, bus=bus, compute=client(cloud))
    deps.store.create_job(job(substatus=JobSubstatus.WAITING_FOR_CAPACITY))
    deps.store.create_job(job("job2"))
    tick(deps, T0)
    cancel(deps, "job1", "not needed", T0)
    published = {bus.topic_path(key) for key, _ in bus.published}
    granted = {b.resource for b in every_binding() if b.member == FN and b.scope is iam.Scope.TOPIC}
    assert published and granted == published
    assert all(b.role is iam.Role.PUBLISHER for b in every_binding() if b.resource in granted)


def test_the_vm_account_publishes_vm_events_writes_jobs_files_and_logs_nothing_more() -> None:
    mine = [b for b in every_binding() if b.member == VM]

    # No Compute, IAM or Firestore right, and no topic of users or of the reaper.
    assert not [b for b in mine if re.search(r"compute|iam|datastore", b.role)]
    topics = {b.resource.rsplit("/", 1)[-1] for b in mine if b.scope is iam.Scope.TOPIC}
    assert topics == {
        "spotline-vm-booted",
        "spotline-epoch-done",
        "spotline-job-finished",
        "spotline-spot-preempted",
    }
    [objects, uploads] = [b for b in mine if b.scope is iam.Scope.BUCKET]
    assert objects.role is iam.Role.OBJECT_USER and objects.resource == "acme-spotline"
    assert objects.condition is not None
    assert (
        'resource.name.startsWith("projects/_/buckets/acme-spotline/objects/runs/jobs/")'
        in objects.condition.expression
    )
    # Uploaded folders: read, never written (another job may run the same).
    assert uploads.role is iam.Role.OBJECT_VIEWER and uploads.resource == "acme-spotline"
    assert uploads.condition is not None
    for prefix in ("code", "data"):
        assert (
            f'resource.name.startsWith("projects/_/buckets/acme-spotline/objects/runs/{prefix}/")'
            in uploads.condition.expression
        )
    project_roles = {b.role for b in mine if b.scope is iam.Scope.PROJECT}
    # Logs and the Ops Agent's metrics, nothing else on the project.
    assert project_roles == {iam.Role.LOG_WRITER, iam.Role.METRIC_WRITER}
    # The token on the VM is narrowed too.
    assert "https://www.googleapis.com/auth/cloud-platform" not in VM_SCOPES


def test_the_build_account_builds_functions_and_holds_nothing_more() -> None:
    build = f"serviceAccount:{CONFIG.build_account}"
    mine = [b for b in every_binding() if b.member == build]

    # Google's role for building functions from source (logs, the source, the
    # image); no right over VMs, Firestore, topics or other accounts.
    assert [(b.scope, b.resource, b.role) for b in mine] == [
        (iam.Scope.PROJECT, "projects/acme-ml", iam.Role.RUN_BUILDER)
    ]
    assert CONFIG.build_account == "spotline-build@acme-ml.iam.gserviceaccount.com"
    # Only the build account holds it.
    assert {b.member for b in every_binding() if b.role is iam.Role.RUN_BUILDER} == {build}


def test_only_the_listed_principals_publish_on_submit_and_cancel() -> None:
    for key in iam.USER_TOPICS:
        publishers = {b.member for b in every_binding() if b.resource == CONFIG.topic(key)}
        assert publishers == {SUBMITTER}
    nobody = iam.IamConfig(**{**CONFIG.__dict__, "submitters": ()})
    assert not [b for b in iam.bindings(nobody) if b.resource == nobody.topic("submit")]
    assert iam.principal_problems(["alice@example.com", "user:alice@example.com"]) == [
        "'alice@example.com' is not a principal (user:, group:, serviceAccount: or domain:)"
    ]


def test_granting_keeps_other_bindings_and_revoking_removes_only_ours() -> None:
    owner = {"role": "roles/owner", "members": ["user:owner@example.com"]}
    policy = {"bindings": [owner], "etag": "BwX="}
    ours = iam.bindings(CONFIG)[:3]

    granted = iam.with_bindings(policy, ours)

    assert iam.missing(granted, ours) == [] and granted["etag"] == "BwX="
    assert owner in granted["bindings"]
    assert iam.without_bindings(granted, ours)["bindings"] == [owner]


def test_no_broad_role_is_written_anywhere_in_the_shipped_code() -> None:
    shipped = [
        *ROOT.joinpath("infra").rglob("*.py"),
        *ROOT.joinpath("functions").rglob("*.py"),
        *ROOT.joinpath("shared").rglob("*.py"),
        *ROOT.joinpath("vm_image").rglob("*"),
        ROOT / "cloudbuild.yaml",
    ]
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in shipped
        if path.is_file() and "__pycache__" not in path.parts
        for match in BROAD.finditer(path.read_text(errors="replace"))
    ]
    assert found == []


def test_a_policy_write_is_read_again_and_retried_while_a_new_account_is_unknown() -> None:
    project = "acme-ml"
    with CloudDouble(project, "us-central1") as cloud:
        config = DeployConfig(
            Settings(
                project=project,
                region="us-central1",
                storage_root="gs://acme-spotline/runs",
                service_account=CONFIG.vm_account,
            ),
            CONFIG.functions_account,
        )
        quick = Backoff(initial_s=0.01, maximum_s=0.05, deadline_s=0.5)
        setup = ProjectSetup(config, endpoints=cloud.endpoints(), grant_backoff=quick)
        setup.ensure_accounts()
        setup.custom_roles.ensure()
        wanted = [b for b in iam.bindings(config.iam_config) if b.scope is iam.Scope.PROJECT]
        cloud.project_apis.refuse_policy_writes = [
            ApiError(400, f"Service account {CONFIG.functions_account} does not exist."),
            ApiError(409, "There were concurrent policy changes."),
        ]

        setup.ensure_bindings(wanted)

        writes = cloud.requests_to("POST", f"/v3/projects/{project}:setIamPolicy")
        reads = cloud.requests_to("POST", f"/v3/projects/{project}:getIamPolicy")
        assert (len(writes), len(reads)) == (3, 3)
        assert iam.missing(cloud.project_apis.policies[f"projects/{project}"], wanted) == []

        # Any other refusal is the deploy's to report, at once.
        cloud.project_apis.refuse_policy_writes = [ApiError(400, "role is not supported")]
        vm_logs = iam.Binding(
            iam.Scope.PROJECT, f"projects/{project}", iam.Role.LOG_WRITER, "user:x@example.com", ""
        )
        with pytest.raises(BadRequest, match="not supported"):
            setup.ensure_bindings([vm_logs])
        assert cloud.project_apis.refuse_policy_writes == []

        # An account IAM never comes to know: the tries end at the deadline
        # with IAM's own answer.
        cloud.project_apis.refuse_policy_writes = [
            ApiError(400, "Service account ghost@acme-ml.iam.gserviceaccount.com does not exist.")
        ] * 10_000
        started = time.monotonic()
        with pytest.raises(BadRequest, match="does not exist"):
            setup.ensure_bindings([vm_logs])
        assert time.monotonic() - started < quick.deadline_s + 30  # generous: a loaded machine
        assert len(cloud.project_apis.refuse_policy_writes) < 10_000 - 1  # it did try again
