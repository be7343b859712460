"""``spotline destroy`` against the wire doubles: after a deploy on a bare
project, destroy leaves nothing spotline made (the data only on request), runs
again as a no-op, and refuses while jobs are active."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from spotline.infra.deploy import iam
from spotline.infra.deploy.deployer import Deployer
from spotline.infra.deploy.destroy import Destroyer, JobsRunning
from spotline.infra.deploy.plan import DeployConfig
from spotline.infra.localstack.emulators import Emulator
from spotline.shared.settings import Settings
from tests.cloud_double import CloudDouble
from tests.cloud_double_project import OWNER
from tests.deploy_cli import DeployCli

pytestmark = pytest.mark.emulators
REGION = "us-central1"
BUCKET = "acme-spotline"


@pytest.fixture
def cloud(project: str, emulators: tuple[Emulator, Emulator]) -> Iterator[CloudDouble]:
    with CloudDouble(project, REGION, pubsub_host=emulators[1].host) as double:
        yield double


def config_for(project: str) -> DeployConfig:
    settings = Settings(
        project=project,
        region=REGION,
        storage_root=f"gs://{BUCKET}/runs",
        image=f"projects/{project}/global/images/family/spotline-agent",
        service_account=iam.VM_ACCOUNT.email(project),
    )
    return DeployConfig(
        settings, iam.FUNCTIONS_ACCOUNT.email(project), submitters=("group:ml@example.com",)
    )


def deployed(cloud: CloudDouble, project: str) -> DeployConfig:
    config = config_for(project)
    Deployer(config, endpoints=cloud.endpoints(), operation_timeout_s=30).run()
    return config


def destroy(cloud: CloudDouble, config: DeployConfig, delete_data: bool = False) -> dict[str, str]:
    changes = Destroyer(config, endpoints=cloud.endpoints(), delete_data=delete_data).run()
    return {f"{c.kind} {c.name}": c.action for c in changes}


def topics(project: str) -> list[str]:
    return [t.name for t in PublisherClient().list_topics(project=f"projects/{project}")]


def test_destroy_leaves_nothing_deploy_made_but_the_data(cloud: CloudDouble, project: str) -> None:
    config = deployed(cloud, project)
    apis = cloud.project_apis
    assert cloud.functions and apis.accounts and apis.sinks and topics(project)
    before = len(cloud.requests)

    actions = destroy(cloud, config)

    deletes = {r.path.rsplit("/", 1)[-1] for r in cloud.requests[before:] if r.method == "DELETE"}
    assert "spotline-reaper" in deletes and "spotline-preemptions" in deletes
    assert {f"spotline-{n}" for n in ("submit-job", "reaper")} <= deletes
    assert cloud.functions == {} and cloud.triggers == {} and cloud.jobs == {}
    assert apis.sinks == {} and apis.accounts == {}
    assert topics(project) == []
    subscriptions = SubscriberClient().list_subscriptions(project=f"projects/{project}")
    assert list(subscriptions) == []
    # The project's policy is as it was before spotline: its owner alone.
    assert apis.policies[f"projects/{project}"]["bindings"] == [
        {"role": "roles/owner", "members": [OWNER]}
    ]
    # The data stays, and the VMs' access to it goes.
    assert BUCKET in apis.buckets and apis.databases
    assert not [
        b
        for b in apis.policies[f"b/{BUCKET}"]["bindings"]
        if b["role"] == "roles/storage.objectUser"
    ]
    assert actions["bucket acme-spotline"] == "kept" and actions["database (default)"] == "kept"


def test_destroy_with_delete_data_removes_the_bucket_and_the_database(
    cloud: CloudDouble, project: str
) -> None:
    config = deployed(cloud, project)
    cloud.project_apis.objects[BUCKET].add("runs/jobs/j1/checkpoints/ckpt-000000000001.pt")

    actions = destroy(cloud, config, delete_data=True)

    assert cloud.project_apis.buckets == {} and cloud.project_apis.databases == {}
    assert actions["bucket acme-spotline"] == "deleted"
    [delete_object] = [r for r in cloud.requests if r.method == "DELETE" and "/o/" in r.path]
    assert delete_object.path.endswith("ckpt-000000000001.pt")


def test_a_second_destroy_changes_nothing(cloud: CloudDouble, project: str) -> None:
    config = deployed(cloud, project)
    destroy(cloud, config)
    writes = len(cloud.writes())

    actions = destroy(cloud, config)

    assert cloud.writes()[writes:] == []
    assert set(actions.values()) <= {"absent", "unchanged", "kept"}


def test_destroy_refuses_while_jobs_are_active(cloud: CloudDouble, project: str) -> None:
    config = deployed(cloud, project)
    jobs = firestore.Client(project=project).collection("jobs")
    jobs.document("j-active").set({"status": "TRAINING"})
    jobs.document("j-done").set({"status": "COMPLETED"})
    writes = len(cloud.writes())

    with pytest.raises(JobsRunning, match=r"1 jobs are active \(j-active\).*--cancel-jobs"):
        destroy(cloud, config)

    assert cloud.writes()[writes:] == [] and cloud.functions


def test_destroy_cancels_active_jobs_when_told_and_waits_for_them(
    cloud: CloudDouble, project: str
) -> None:
    config = deployed(cloud, project)
    jobs = firestore.Client(project=project).collection("jobs")
    jobs.document("j-active").set({"status": "QUEUING"})
    subscriber = SubscriberClient()
    watch = f"projects/{project}/subscriptions/watch-cancel"
    subscriber.create_subscription(name=watch, topic=f"projects/{project}/topics/spotline-cancel")

    def the_cancel_function() -> None:
        """Stands in for cancel_job: sees the message, ends the job."""
        for _ in range(100):
            pulled = subscriber.pull(subscription=watch, max_messages=1, timeout=5)
            if pulled.received_messages:
                assert b'"j-active"' in pulled.received_messages[0].message.data
                jobs.document("j-active").update({"status": "CANCELED"})
                return
            time.sleep(0.1)

    helper = threading.Thread(target=the_cancel_function)
    helper.start()
    changes = Destroyer(
        config, endpoints=cloud.endpoints(), cancel_jobs=True, cancel_timeout_s=30
    ).run()
    helper.join()

    assert [c.action for c in changes if c.kind == "jobs"] == ["cancelled"]
    assert cloud.functions == {}


def test_spotline_destroy_asks_for_yes_and_dry_run_changes_nothing(
    cloud: CloudDouble,
    project: str,
    deploy_cli: DeployCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert deploy_cli.deploy() == 0
    writes = len(cloud.writes())

    with pytest.raises(SystemExit, match="--yes"):
        deploy_cli.destroy()
    capsys.readouterr()
    assert deploy_cli.destroy("--dry-run") == 0

    assert cloud.writes()[writes:] == []
    said = " ".join(capsys.readouterr().out.split())
    assert "function spotline-reaper would delete" in said
    assert "account spotline-vm would delete" in said and "bucket acme-spotline kept" in said
    assert deploy_cli.destroy("--yes") == 0
    assert cloud.functions == {} and cloud.project_apis.accounts == {}


def test_spotline_destroy_json_prints_what_went_as_one_document(
    cloud: CloudDouble,
    project: str,
    deploy_cli: DeployCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert deploy_cli.deploy() == 0
    capsys.readouterr()

    assert deploy_cli.destroy("--dry-run", "--json") == 0
    would = json.loads(capsys.readouterr().out)
    assert deploy_cli.destroy("--yes", "--json") == 0
    said = capsys.readouterr()

    went = json.loads(said.out)  # stdout is the document alone
    assert (would["project"], would["dry_run"], went["dry_run"]) == (project, True, False)
    actions = {f"{c['kind']} {c['name']}": c["action"] for c in went["changes"]}
    assert actions["function spotline-reaper"] == "deleted"
    assert actions["bucket acme-spotline"] == "kept"
    assert {f"{c['kind']} {c['name']}" for c in would["changes"]} == set(actions)
    assert "spotline-reaper" in said.err  # the progress, for a person
    assert cloud.functions == {}
