"""``spotline deploy`` through the real client libraries: Functions, Scheduler and
Eventarc against a local wire double, Pub/Sub and Firestore on their emulators."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from dataclasses import replace

import pytest
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from infra.deploy import Deployer
from infra.deploy_plan import DeployConfig
from infra.deploy_source import build_archive
from infra.emulators import Emulator
from infra.topology import FUNCTIONS
from shared.catalog import load_catalog
from shared.config import TOPICS, Settings
from tests.cloud_double import CloudDouble

pytestmark = pytest.mark.emulators
REGION = "us-central1"
FUNCTIONS_ACCOUNT = "spotline-fn@acme.iam.gserviceaccount.com"
VM_ACCOUNT = "spotline-vm@acme.iam.gserviceaccount.com"


@pytest.fixture
def cloud(project: str, emulators: tuple[Emulator, Emulator]) -> Iterator[CloudDouble]:
    with CloudDouble(project, REGION, pubsub_host=emulators[1].host) as double:
        yield double


def deploy_config(project: str, **settings: object) -> DeployConfig:
    base = Settings(
        project=project,
        region=REGION,
        compute="gce",
        storage_root="gs://acme-spotline/runs",
        image=f"projects/{project}/global/images/family/spotline-agent",
        service_account=VM_ACCOUNT,
    )
    return DeployConfig(replace(base, **settings), FUNCTIONS_ACCOUNT)  # type: ignore[arg-type]


def deploy(cloud: CloudDouble, config: DeployConfig) -> dict[str, str]:
    """Deploy; each resource's action, as ``kind name`` -> action."""
    changes = Deployer(config, endpoints=cloud.endpoints(), operation_timeout_s=30).run()
    return {f"{c.kind} {c.name}": c.action for c in changes}


def test_a_first_deploy_creates_the_whole_topology(cloud: CloudDouble, project: str) -> None:
    actions = deploy(cloud, deploy_config(project))

    # 1. Every topic, the dead-letter one included, in the Pub/Sub emulator.
    listed = PublisherClient().list_topics(project=f"projects/{project}")
    assert sorted(t.name.rsplit("/", 1)[-1] for t in listed) == sorted(TOPICS.values())
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
        assert body["serviceConfig"]["environmentVariables"]["SPOTLINE_COMPUTE"] == "gce"
        assert body["serviceConfig"]["serviceAccountEmail"] == FUNCTIONS_ACCOUNT
    [reaper] = [r.body for r in creates if r.query["functionId"] == "spotline-reaper"]
    assert reaper["buildConfig"]["entryPoint"] == "reaper"
    tick_topic = f"projects/{project}/topics/spotline-reaper-tick"
    assert reaper["eventTrigger"]["pubsubTopic"] == tick_topic
    assert reaper["serviceConfig"]["timeoutSeconds"] == 540
    # The upload is the archive, sent as a signed URL wants it.
    [put] = cloud.requests_to("PUT", next(iter(cloud.uploads)))
    assert put.headers["content-type"] == "application/zip" and "authorization" not in put.headers
    archive = zipfile.ZipFile(io.BytesIO(put.content))
    assert archive.read("requirements.txt").decode() == build_archive().requirements
    # 4. The topology's delivery policy on each subscription Eventarc made.
    subscriber = SubscriberClient()
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


def test_a_second_deploy_changes_nothing(cloud: CloudDouble, project: str) -> None:
    deploy(cloud, deploy_config(project))
    before = len(cloud.requests)

    actions = deploy(cloud, deploy_config(project))

    again = cloud.requests[before:]
    assert [r for r in again if r.method != "GET"] == []
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
