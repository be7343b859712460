"""``spotline deploy --user alice=user:alice@... `` (the per-user mode, SECURITY.md)
against the wire doubles, Pub/Sub on its emulator: each user's own topics, a push
subscription of each to its function (the topic in the path, an OIDC token of
the functions' account), publisher rights for that user's principal alone; a
second deploy changes nothing; destroy leaves none of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from spotline.infra.deploy import iam
from spotline.infra.deploy.deployer import Deployer
from spotline.infra.deploy.destroy import Destroyer
from spotline.infra.deploy.plan import DeployConfig, problems
from spotline.infra.localstack.emulators import Emulator
from spotline.infra.topology import FUNCTIONS
from spotline.shared.domain import tenancy
from tests.cloud_double import CloudDouble
from tests.emulators.test_deploy import deploy_config

pytestmark = pytest.mark.emulators
REGION = "us-central1"
# A VM event topic's name (spotline-KEY-u-USER) and the function it goes to.
VM_TOPICS = {
    "vm-booted": "on_vm_booted",
    "epoch-done": "on_epoch_done",
    "job-finished": "on_job_finished",
    "spot-preempted": "on_spot_preempted",
}
ALICE, BOB = "user:alice@example.com", "group:bob-team@example.com"


@pytest.fixture
def cloud(project: str, emulators: tuple[Emulator, Emulator]) -> Iterator[CloudDouble]:
    with CloudDouble(project, REGION, pubsub_host=emulators[1].host) as double:
        yield double


def config_for(project: str, **kw: Any) -> DeployConfig:
    """test_deploy's configuration, in the per-user mode for alice and bob."""
    base = deploy_config(project, user_topics=("alice", "bob"))
    return dataclasses.replace(base, **{"user_principals": (("alice", ALICE), ("bob", BOB)), **kw})


def run(cloud: CloudDouble, config: DeployConfig) -> dict[str, str]:
    changes = Deployer(config, endpoints=cloud.endpoints(), operation_timeout_s=30).run()
    return {f"{c.kind} {c.name}": c.action for c in changes}


def test_each_user_gets_topics_only_they_publish_on_pushed_to_the_functions(
    cloud: CloudDouble, project: str
) -> None:
    actions = run(cloud, config_for(project))

    topics = {
        t.name.rsplit("/", 1)[-1]
        for t in PublisherClient().list_topics(project=f"projects/{project}")
    }
    mine = {f"spotline-{k}-u-{u}" for k in ("submit", "cancel") for u in ("alice", "bob")}
    vms = {f"spotline-{k}-u-{u}" for k in VM_TOPICS for u in ("alice", "bob")}
    mine |= vms
    assert mine <= topics
    subscriber = SubscriberClient()
    function_of = {f.entry_point: f for f in FUNCTIONS}
    for user in ("alice", "bob"):
        for key, entry in (("submit", "submit_job"), ("cancel", "cancel_job"), *VM_TOPICS.items()):
            function = function_of[entry]
            name = f"{function.function_id}-u-{user}"
            assert actions[f"subscription {name}"] == "created"
            sub = subscriber.get_subscription(
                subscription=f"projects/{project}/subscriptions/{name}"
            )
            topic = f"projects/{project}/topics/spotline-{key}-u-{user}"
            assert sub.topic == topic
            url = cloud.functions[
                f"projects/{project}/locations/{REGION}/functions/{function.function_id}"
            ]["serviceConfig"]["uri"]
            # The topic in the path: the functions framework makes it the source.
            assert sub.push_config.push_endpoint == f"{url}/{topic}"
            assert sub.ack_deadline_seconds == function.ack_deadline_s
            assert sub.dead_letter_policy.max_delivery_attempts == function.max_delivery_attempts
    # Publisher on a user's own topics: that user's principal, and no one else.
    for user, principal in (("alice", ALICE), ("bob", BOB)):
        for key in ("submit", "cancel"):
            policy = cloud.project_apis.policies[
                f"projects/{project}/topics/spotline-{key}-u-{user}"
            ]
            members = {m for b in policy["bindings"] for m in b["members"]}
            assert members == {principal}
        # Its VMs' event topics: that user's VM account, and no one else.
        for key in VM_TOPICS:
            policy = cloud.project_apis.policies[
                f"projects/{project}/topics/spotline-{key}-u-{user}"
            ]
            members = {m for b in policy["bindings"] for m in b["members"]}
            assert members == {f"serviceAccount:{tenancy.vm_account_email(user, project)}"}
    # The shared topics take no user's messages.
    shared = cloud.project_apis.policies.get(f"projects/{project}/topics/spotline-submit", {})
    assert not [b for b in shared.get("bindings", []) if b["role"] == iam.Role.PUBLISHER]
    # Nor the shared VM event topics any VM's: only the log sink writes preemptions there.
    for key in VM_TOPICS:
        policy = cloud.project_apis.policies.get(f"projects/{project}/topics/spotline-{key}", {})
        members = {m for b in policy.get("bindings", []) for m in b["members"]}
        assert not [m for m in members if "slvm-" in m or "spotline-vm@" in m], key


def test_a_second_deploy_changes_nothing_and_destroy_removes_it_all(
    cloud: CloudDouble, project: str
) -> None:
    config = config_for(project)
    run(cloud, config)
    again = run(cloud, config)
    routes = {k: v for k, v in again.items() if "-u-" in k}
    assert routes and set(routes.values()) == {"unchanged"}

    Destroyer(config, endpoints=cloud.endpoints()).run()
    assert list(PublisherClient().list_topics(project=f"projects/{project}")) == []
    assert list(SubscriberClient().list_subscriptions(project=f"projects/{project}")) == []


def test_a_user_with_no_principal_or_with_shared_submitters_is_refused(project: str) -> None:
    unmapped = config_for(project, user_principals=(("alice", ALICE),))
    assert "user topics of bob with no principal" in "; ".join(problems(unmapped))
    both = config_for(project, submitters=("group:ml@example.com",))
    assert "shared topics are refused" in "; ".join(problems(both))
    bad = config_for(project, user_principals=(("alice", "alice@example.com"), ("bob", BOB)))
    assert "'alice@example.com' is not a principal" in "; ".join(problems(bad))


def test_deploy_reads_user_principal_pairs_and_names_a_bad_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    from spotline.infra.deploy.command import add_arguments, cli_config, config_from

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    target = ["--project", "acme", "--region", REGION, "--storage-root", "gs://acme-spotline"]
    pairs = ["--user", f"bob={BOB}", "--user", f"alice={ALICE}"]
    config = config_from(parser.parse_args([*target, *pairs]), env={})
    assert config.settings.user_topics == ("alice", "bob")
    assert config.user_principals == (("bob", BOB), ("alice", ALICE))
    # The CLI, reading the config file, publishes on the users' own topics.
    assert cli_config(config.settings)["user_topics"] == ["alice", "bob"]
    with pytest.raises(SystemExit, match="'alice' is not USER=PRINCIPAL"):
        config_from(parser.parse_args([*target, "--user", "alice"]), env={})
