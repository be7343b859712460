"""``spotline deploy`` through the real client libraries: Functions, Scheduler and
Eventarc against a local wire double, Pub/Sub and Firestore on their emulators."""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from collections.abc import Iterator

import pytest
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from spotline.infra.cli.commands import main
from spotline.infra.deploy import iam
from spotline.infra.deploy.bootstrap import SERVICES
from spotline.infra.deploy.deployer import Deployer
from spotline.infra.deploy.errors import DeployError
from spotline.infra.deploy.plan import DeployConfig
from spotline.infra.deploy.source import build_archive
from spotline.infra.localcloud.wire import ApiError, RecordedRequest
from spotline.infra.localstack.emulators import Emulator
from spotline.infra.topology import FUNCTIONS
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.retries import Backoff
from spotline.shared.settings import TOPICS, Settings
from spotline.shared.settings_file import config_path
from tests.cloud_double import CloudDouble
from tests.deploy_cli import DeployCli, cli_args

pytestmark = pytest.mark.emulators
REGION = "us-central1"
FUNCTIONS_ACCOUNT = "spotline-fn@acme.iam.gserviceaccount.com"
VM_ACCOUNT = "spotline-vm@acme.iam.gserviceaccount.com"


def accounts(project: str) -> tuple[str, str]:
    """The functions' and the VMs' accounts deploy makes in ``project``."""
    return iam.FUNCTIONS_ACCOUNT.email(project), iam.VM_ACCOUNT.email(project)


@pytest.fixture
def cloud(project: str, emulators: tuple[Emulator, Emulator]) -> Iterator[CloudDouble]:
    with CloudDouble(project, REGION, pubsub_host=emulators[1].host) as double:
        yield double


def deploy_config(project: str, **settings: object) -> DeployConfig:
    base = Settings(
        project=project,
        region=REGION,
        storage_root="gs://acme-spotline/runs",
        image=f"projects/{project}/global/images/family/spotline-agent",
        service_account=accounts(project)[1],
    )
    return DeployConfig(base.replace(**settings), accounts(project)[0])


def deploy(cloud: CloudDouble, config: DeployConfig) -> dict[str, str]:
    """Deploy; each resource's action, as ``kind name`` -> action."""
    changes = Deployer(config, endpoints=cloud.endpoints(), operation_timeout_s=30).run()
    return {f"{c.kind} {c.name}": c.action for c in changes}


def test_a_first_deploy_creates_the_whole_topology(cloud: CloudDouble, project: str) -> None:
    actions = deploy(cloud, deploy_config(project))

    # 1. Every topic, the dead-letter one included, in the Pub/Sub emulator.
    listed = PublisherClient().list_topics(project=f"projects/{project}")
    assert sorted(t.name.rsplit("/", 1)[-1] for t in listed) == sorted(TOPICS.values())
    subscriber = SubscriberClient()
    keeper = subscriber.get_subscription(
        subscription=f"projects/{project}/subscriptions/spotline-dead-letter"
    )
    assert keeper.topic == f"projects/{project}/topics/spotline-dead-letter"
    assert keeper.message_retention_duration.total_seconds() == 7 * 24 * 3600
    # 2. The catalog, in the Firestore emulator.
    machines = firestore.Client(project=project).collection("machines").stream()
    assert {m.id for m in machines} == set(load_catalog())
    # 3. One function per topology entry, each created from a source it uploaded.
    creates = cloud.requests_to("POST", f"/locations/{REGION}/functions")
    assert sorted(r.query["functionId"] for r in creates) == sorted(
        f.function_id for f in FUNCTIONS
    )
    assert len(cloud.uploads) == len(FUNCTIONS)
    for request in creates:
        body = request.body
        assert body["buildConfig"]["source"]["storageSource"]["object"] in cloud.uploads
        assert body["eventTrigger"]["pubsubTopic"].startswith(f"projects/{project}/topics/")
        assert "SPOTLINE_COMPUTE_ENDPOINT" not in body["serviceConfig"]["environmentVariables"]
        assert body["serviceConfig"]["serviceAccountEmail"] == accounts(project)[0]
    [reaper] = [r.body for r in creates if r.query["functionId"] == "spotline-reaper"]
    assert reaper["buildConfig"]["entryPoint"] == "reaper"
    tick_topic = f"projects/{project}/topics/spotline-reaper-tick"
    assert reaper["eventTrigger"]["pubsubTopic"] == tick_topic
    assert reaper["serviceConfig"]["timeoutSeconds"] == 540
    # The job state-change events' topic, and the function posting them to webhooks.
    [notify] = [r.body for r in creates if r.query["functionId"] == "spotline-notify-webhook"]
    events_topic = f"projects/{project}/topics/spotline-job-events"
    assert notify["eventTrigger"]["pubsubTopic"] == events_topic
    # The upload is the archive, sent as a signed URL wants it.
    [put] = cloud.requests_to("PUT", next(iter(cloud.uploads)))
    assert put.headers["content-type"] == "application/zip" and "authorization" not in put.headers
    archive = zipfile.ZipFile(io.BytesIO(put.content))
    assert archive.read("requirements.txt").decode() == build_archive().requirements
    # 4. The topology's delivery policy on each subscription Eventarc made.
    for function in FUNCTIONS:
        trigger = cloud.functions[
            f"projects/{project}/locations/{REGION}/functions/{function.function_id}"
        ]["eventTrigger"]["trigger"]
        name = cloud.triggers[trigger]["transport"]["pubsub"]["subscription"]
        subscription = subscriber.get_subscription(subscription=name)
        assert subscription.ack_deadline_seconds == function.ack_deadline_s
        assert subscription.retry_policy.minimum_backoff.seconds == function.retry.minimum_backoff_s
        assert subscription.retry_policy.maximum_backoff.seconds == function.retry.maximum_backoff_s
        assert subscription.dead_letter_policy.dead_letter_topic == (
            f"projects/{project}/topics/spotline-dead-letter"
        )
        assert (
            subscription.dead_letter_policy.max_delivery_attempts == function.max_delivery_attempts
        )
    # 5. The reaper's tick.
    job = cloud.jobs[f"projects/{project}/locations/{REGION}/jobs/spotline-reaper"]
    assert job["schedule"] == "* * * * *" and job["timeZone"] == "UTC"
    assert job["pubsubTarget"]["topicName"] == f"projects/{project}/topics/spotline-reaper-tick"
    assert actions["job spotline-reaper"] == "created"
    assert all(actions[f"function {f.function_id}"] == "created" for f in FUNCTIONS)


def test_a_first_deploy_makes_a_bare_projects_one_time_steps(
    cloud: CloudDouble, project: str
) -> None:
    actions = deploy(cloud, deploy_config(project))

    apis = cloud.project_apis
    # 1. The APIs, enabled in one request.
    [enable] = cloud.requests_to("POST", "/services:batchEnable")
    assert set(enable.body["serviceIds"]) == set(SERVICES) == apis.enabled
    # 2. Firestore in native mode, in the region.
    [database] = apis.databases.values()
    assert (database["type"], database["locationId"]) == ("FIRESTORE_NATIVE", REGION)
    # 3. The bucket: uniform access, old checkpoints deleted, outputs kept.
    bucket = apis.buckets["acme-spotline"]
    assert bucket["iamConfiguration"]["uniformBucketLevelAccess"]["enabled"] is True
    [rule] = bucket["lifecycle"]["rule"]
    assert rule["action"] == {"type": "Delete"}
    assert rule["condition"]["matchesPrefix"] == ["runs/jobs/"]
    assert ".pt" in rule["condition"]["matchesSuffix"]
    # 4. The three accounts: the functions', the VMs', the functions' builds'.
    assert set(apis.accounts) == {*accounts(project), iam.BUILD_ACCOUNT.email(project)}
    # 5. The sink: Compute Engine's preemption entries to the preempted topic.
    sink = apis.sinks["spotline-preemptions"]
    assert sink["destination"] == (
        f"pubsub.googleapis.com/projects/{project}/topics/spotline-spot-preempted"
    )
    assert 'protoPayload.methodName="compute.instances.preempted"' in sink["filter"]
    [create_sink] = cloud.requests_to("POST", f"/projects/{project}/sinks")
    assert create_sink.query["uniqueWriterIdentity"].lower() == "true"  # the library sends True
    # 6. Pub/Sub's agent may dead-letter: publisher on the dead-letter topic,
    # subscriber on every trigger's subscription.
    agent = "serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com"
    dead_letter = apis.policies[f"projects/{project}/topics/spotline-dead-letter"]
    assert dead_letter["bindings"] == [{"role": "roles/pubsub.publisher", "members": [agent]}]
    for trigger in cloud.triggers.values():
        subscription = trigger["transport"]["pubsub"]["subscription"]
        assert {"role": "roles/pubsub.subscriber", "members": [agent]} in apis.policies[
            subscription
        ]["bindings"]
    # Each resource's policy was written once.
    writes = [r.path for r in cloud.requests if r.path.endswith(":setIamPolicy")]
    assert len(writes) == len(set(writes))
    assert actions[f"services {len(SERVICES)} APIs"] == "enabled"
    assert actions["database (default)"] == "created"


def test_a_second_deploy_changes_nothing(cloud: CloudDouble, project: str) -> None:
    deploy(cloud, deploy_config(project))
    before = len(cloud.writes())

    actions = deploy(cloud, deploy_config(project))

    assert cloud.writes()[before:] == []
    assert set(actions.values()) == {"unchanged", "seeded"}
    assert len(cloud.functions) == len(FUNCTIONS) and len(cloud.jobs) == 1


def test_changed_settings_update_the_variables_and_upload_nothing(
    cloud: CloudDouble, project: str
) -> None:
    deploy(cloud, deploy_config(project))
    uploads = len(cloud.uploads)
    cloud.operation_polls = 2  # each update is still running when first polled

    actions = deploy(cloud, deploy_config(project, max_active_jobs=2))

    patches = cloud.requests_to("PATCH", "")
    polls = [r for r in cloud.requests if "/operations/" in r.path]
    assert len(polls) == len(FUNCTIONS) * (1 + 2)  # the creates' polls, then the updates'
    assert len(patches) == len(FUNCTIONS)
    assert {p.query["updateMask"] for p in patches} == {"serviceConfig.environmentVariables"}
    assert len(cloud.uploads) == uploads
    for function in cloud.functions.values():
        assert function["serviceConfig"]["environmentVariables"]["SPOTLINE_MAX_ACTIVE_JOBS"] == "2"
    assert actions["function spotline-submit-job"] == "updated"


def test_a_trigger_eventarc_cannot_show_leaves_the_gcloud_command(
    cloud: CloudDouble, project: str
) -> None:
    deploy(cloud, deploy_config(project))
    cloud.triggers.clear()

    changes = Deployer(deploy_config(project), endpoints=cloud.endpoints()).run()

    [reaper] = [c for c in changes if c.kind == "subscription" and c.name == "spotline-reaper"]
    assert reaper.action == "not set"
    assert "gcloud pubsub subscriptions update" in reaper.detail
    assert "--max-delivery-attempts=5" in reaper.detail and "--ack-deadline=540" in reaper.detail


# -- the command ----------------------------------------------------------------


def test_spotline_deploy_deploys_through_the_endpoints_it_is_given(
    cloud: CloudDouble,
    project: str,
    deploy_cli: DeployCli,
    capsys: pytest.CaptureFixture[str],
) -> None:

    assert deploy_cli.deploy() == 0

    out = capsys.readouterr().out
    assert "function      spotline-submit-job" in out and "created" in out
    assert len(cloud.functions) == len(FUNCTIONS)
    env = next(iter(cloud.functions.values()))["serviceConfig"]["environmentVariables"]
    assert Settings.from_env(env) == deploy_config(project).settings


def test_spotline_deploy_writes_the_config_the_cli_reads_back(
    cloud: CloudDouble,
    project: str,
    deploy_cli: DeployCli,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = config_path(os.environ)
    assert path is not None and str(path).startswith(os.environ["XDG_CONFIG_HOME"])

    assert deploy_cli.deploy("--zones", "us-central1-b,us-central1-c") == 0

    assert f"the CLI's config (project, region, zones, storage_root): {path}" in (
        capsys.readouterr().out
    )
    assert json.loads(path.read_text()) == {
        "project": project,
        "region": REGION,
        "zones": ["us-central1-b", "us-central1-c"],
        "storage_root": "gs://acme-spotline/runs",
    }
    # A shell with no variable at all now reads the deployed project.
    settings = Settings.from_env({"SPOTLINE_CONFIG": str(path)})
    assert (settings.project, settings.zones) == (project, ("us-central1-b", "us-central1-c"))
    # And a second deploy needs no --project, --region or --storage-root.
    for name in ("SPOTLINE_PROJECT", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(name)
    assert main(["deploy", "--dry-run"]) == 0
    assert f"project {project}, region {REGION}" in capsys.readouterr().out


def test_dry_run_reads_the_project_and_changes_nothing(
    cloud: CloudDouble,
    project: str,
    deploy_cli: DeployCli,
    capsys: pytest.CaptureFixture[str],
) -> None:

    assert deploy_cli.deploy("--dry-run") == 0

    assert cloud.requests and cloud.writes() == []  # reads only
    assert list(PublisherClient().list_topics(project=f"projects/{project}")) == []
    out = capsys.readouterr().out
    said = " ".join(out.split())
    # What a bare project lacks, read from it.
    assert f"services {len(SERVICES)} APIs would enable: compute.googleapis.com" in said
    assert "database (default) would create: native mode, us-central1" in said
    assert "bucket acme-spotline would create: uniform access, lifecycle rule" in said
    assert "account spotline-vm would create" in said
    assert f"iam project {project} would grant: compute.instanceAdmin.v1" in said
    assert "iam topic spotline-submit" not in said  # no submitter was named
    assert "sink spotline-preemptions would create" in said
    assert "topic spotline-submit would create" in said
    assert "function spotline-submit-job would create" in said
    assert "job spotline-reaper would create" in said
    # What the topology declares.
    assert "spotline-reaper-tick" in out and "spotline-submit-job" in out
    assert "SPOTLINE_STORAGE_ROOT=gs://acme-spotline/runs" in out
    path = config_path(os.environ)
    assert path is not None and f"CLI config:    {path} would get" in out
    assert not path.exists()  # a dry run writes nothing


def test_dry_run_after_a_deploy_finds_everything_right(
    cloud: CloudDouble,
    project: str,
    deploy_cli: DeployCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert deploy_cli.deploy() == 0
    capsys.readouterr()
    writes = len(cloud.writes())
    uploads = len(cloud.requests_to("POST", ":generateUploadUrl"))

    assert deploy_cli.deploy("--dry-run") == 0

    assert len(cloud.writes()) == writes
    assert len(cloud.requests_to("POST", ":generateUploadUrl")) == uploads
    steps = capsys.readouterr().out.split("\n\n")[0].splitlines()[1:]
    assert len(steps) >= 30 and all(" unchanged" in line for line in steps), steps
    assert any(line.startswith("function      spotline-reaper ") for line in steps)


def test_missing_settings_are_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SPOTLINE_PROJECT", "GOOGLE_CLOUD_PROJECT", "SPOTLINE_STORAGE_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SPOTLINE_SERVICE_ACCOUNT", raising=False)

    with pytest.raises(SystemExit) as exit_:
        main(["deploy", "--region", "us-central1", "--service-account", FUNCTIONS_ACCOUNT])

    message = str(exit_.value)
    assert "--project" in message and "--storage-root" in message
    # The accounts default to those deploy makes.
    assert "--region" not in message and "service-account" not in message


def test_a_region_spotline_has_no_zones_for_needs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPOTLINE_ZONES", raising=False)
    args = [*cli_args("acme"), "--region", "asia-south2", "--dry-run"]

    with pytest.raises(SystemExit, match=r"--zones .*asia-south2"):
        main(args)


def test_a_local_storage_root_is_refused() -> None:
    args = [*cli_args("acme"), "--storage-root", "/tmp/spotline", "--dry-run"]

    with pytest.raises(SystemExit, match="gs://"):
        main(args)


def test_a_source_upload_refused_while_permissions_propagate_is_tried_again(
    cloud: CloudDouble, project: str
) -> None:
    """A signed URL answering 403 just after it was made is tried again; any
    other refusal fails the deploy at once; a 403 that never passes ends."""
    quick = Backoff(initial_s=0.01, maximum_s=0.05, deadline_s=1.0)
    propagating = ApiError(403, "the signed URL's permission is not there yet")
    cloud.refuse_uploads = [propagating, propagating]

    Deployer(deploy_config(project), endpoints=cloud.endpoints(), upload_backoff=quick).run()

    first = uploads_sent(cloud)[:3]
    assert len({put.path for put in first}) == 1  # the same URL, three times
    assert len(cloud.uploads) == len(FUNCTIONS)

    # Deployed: a new deploy uploads nothing, so the next uploads are sent alone.
    again = Deployer(deploy_config(project), endpoints=cloud.endpoints(), upload_backoff=quick)
    cloud.refuse_uploads = [ApiError(400, "not a zip")]
    puts = len(uploads_sent(cloud))
    with pytest.raises(DeployError, match="source upload failed: HTTP 400"):
        again._upload(build_archive())
    assert len(uploads_sent(cloud)) == puts + 1

    cloud.refuse_uploads = [propagating] * 10_000
    started = time.monotonic()
    with pytest.raises(DeployError, match="source upload failed: HTTP 403"):
        again._upload(build_archive())
    assert time.monotonic() - started < quick.deadline_s + 30  # generous: a loaded machine
    assert len(cloud.refuse_uploads) < 10_000 - 1  # it did try again


def uploads_sent(cloud: CloudDouble) -> list[RecordedRequest]:
    return [r for r in cloud.requests if r.method == "PUT" and r.path.startswith("/upload/")]


def test_spotline_deploy_json_prints_what_it_changed_as_one_document(
    cloud: CloudDouble,
    project: str,
    deploy_cli: DeployCli,
    capsys: pytest.CaptureFixture[str],
) -> None:

    assert deploy_cli.deploy("--json") == 0

    said = capsys.readouterr()
    printed = json.loads(said.out)  # stdout is the document alone
    assert (printed["project"], printed["region"], printed["dry_run"]) == (project, REGION, False)
    changes = {f"{c['kind']} {c['name']}": c for c in printed["changes"]}
    assert changes["function spotline-submit-job"]["action"] == "created"
    assert set(printed["changes"][0]) == {"kind", "name", "action", "detail"}
    assert printed["config_path"] == str(config_path(os.environ))
    assert printed["config"]["project"] == project
    # The progress a person watches for minutes goes to stderr.
    assert "spotline-submit-job" in said.err and "deploying spotline" in said.err

    # A dry run after it: every change "unchanged", nothing written.
    writes = len(cloud.writes())
    assert deploy_cli.deploy("--dry-run", "--json") == 0
    again = json.loads(capsys.readouterr().out)
    assert again["dry_run"] is True and len(cloud.writes()) == writes
    assert {c["action"] for c in again["changes"]} == {"unchanged"}
    assert ("function", "spotline-submit-job") in {(c["kind"], c["name"]) for c in again["changes"]}
