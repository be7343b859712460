"""``spotline deploy`` in the per-user mode against the wire doubles (Pub/Sub on
its emulator): one VM account per user, each granted exactly what
``spotline.infra.deploy.iam`` declares for it and nothing wider; a network
where nothing reaches a VM but its own gang's nodes (the functions' rules);
destroy takes it all away."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import pytest

from spotline.infra.deploy import custom_roles, iam
from spotline.infra.deploy.deployer import Deployer
from spotline.infra.deploy.destroy import Destroyer
from spotline.infra.deploy.plan import DeployConfig
from spotline.infra.localstack.emulators import Emulator
from spotline.shared.domain import tenancy
from tests.cloud_double import CloudDouble
from tests.cloud_double_network import discovery_method, schema_problems
from tests.cloud_double_project import PROJECT_NUMBER
from tests.emulators.test_deploy import deploy_config

pytestmark = pytest.mark.emulators
REGION = "us-central1"
ALICE, BOB = "user:alice@example.com", "group:bob-team@example.com"
# Roles no user's VM account may hold, on any resource.
WIDE = re.compile(r"roles/(owner|editor|viewer|compute\.|iam\.|datastore\.|storage\.admin)")


@pytest.fixture
def cloud(project: str, emulators: tuple[Emulator, Emulator]) -> Iterator[CloudDouble]:
    with CloudDouble(project, REGION, pubsub_host=emulators[1].host) as double:
        yield double


def config_for(project: str, users: tuple[str, ...] = ("alice", "bob")) -> DeployConfig:
    principals = {"alice": ALICE, "bob": BOB}
    base = deploy_config(project, user_topics=users)
    return dataclasses.replace(base, user_principals=tuple((u, principals[u]) for u in users))


def run(cloud: CloudDouble, config: DeployConfig) -> dict[str, str]:
    changes = Deployer(config, endpoints=cloud.endpoints(), operation_timeout_s=30).run()
    return {f"{c.kind} {c.name}": c.action for c in changes}


def on_wire(cloud: CloudDouble) -> set[tuple[str, str, str, str]]:
    """Every binding the project's policies hold now: (resource, role, member, condition)."""
    return {
        (
            resource.removeprefix("b/"),
            b["role"],
            member,
            (b.get("condition") or {}).get("expression", ""),
        )
        for resource, policy in cloud.project_apis.policies.items()
        for b in policy.get("bindings", [])
        for member in b.get("members", [])
    }


def users_grants(cloud: CloudDouble, project: str) -> set[tuple[str, str, str, str]]:
    """What the users' VM accounts hold, and who holds a role on those accounts."""
    emails = [tenancy.vm_account_email(u, project) for u in ("alice", "bob")]
    return {
        g
        for g in on_wire(cloud)
        if g[2].removeprefix("serviceAccount:") in emails or g[0].rsplit("/", 1)[-1] in emails
    }


def declared(binding: iam.Binding) -> tuple[str, str, str, str]:
    condition = binding.condition.expression if binding.condition else ""
    return (binding.resource, str(binding.role), binding.member, condition)


def test_each_user_gets_a_vm_account_granted_exactly_the_narrowed_declaration(
    cloud: CloudDouble, project: str
) -> None:
    config = config_for(project)
    actions = run(cloud, config)
    access = config.iam_config

    emails = {u: tenancy.vm_account_email(u, project) for u in ("alice", "bob")}
    for user, email in emails.items():
        assert actions[f"account {tenancy.vm_account_id(user)}"] == "created"
        assert email in cloud.project_apis.accounts
    granted = users_grants(cloud, project)
    wanted = {declared(b) for b in iam.user_bindings(access, PROJECT_NUMBER)}
    # Exactly the declaration: a role, a resource or a member more, or a
    # condition missing or widened, is a grant the declaration does not hold.
    assert granted == wanted
    fn = f"serviceAccount:{access.functions_account}"
    assert not [g for g in granted if g[2] != fn and WIDE.search(g[1])]
    for user, email in emails.items():
        mine = {g for g in granted if g[2] == f"serviceAccount:{email}"}
        assert mine
        other = "bob" if user == "alice" else "alice"
        [objects] = [g for g in mine if g[1] == "roles/storage.objectUser"]
        assert objects[0] == "acme-spotline"
        assert (
            f'startsWith("projects/_/buckets/acme-spotline/objects/runs/users/{user}/")'
            in (objects[3])
        )
        assert f"users/{other}/" not in objects[3] and "/jobs/" not in objects[3]
        [secrets] = [g for g in mine if g[1] == "roles/secretmanager.secretAccessor"]
        assert secrets[0] == f"projects/{project}"
        assert secrets[3] == (
            f'resource.name.startsWith("projects/{PROJECT_NUMBER}/secrets/spotline-u-{user}_")'
        )
        topics = {g[0].rsplit("/", 1)[-1] for g in mine if g[1] == "roles/pubsub.publisher"}
        # Its user's own VM event topics only: not the shared ones, not the other user's.
        assert topics == {f"spotline-vm-booted-u-{user}", f"spotline-epoch-done-u-{user}",
                          f"spotline-job-finished-u-{user}",
                          f"spotline-spot-preempted-u-{user}"}  # fmt: skip
        publishers = {
            g[2]
            for g in on_wire(cloud)
            if g[1] == "roles/pubsub.publisher" and g[0].endswith(tuple(topics))
        }
        assert publishers == {f"serviceAccount:{email}"}  # and no one else publishes there
        # No condition-free grant beyond logs and metrics.
        assert {g[1] for g in mine if not g[3]} == {
            "roles/logging.logWriter",
            "roles/monitoring.metricWriter",
            "roles/pubsub.publisher",
        }
        # Only the functions' account may attach it to a VM; no person may.
        attach = {g[2] for g in on_wire(cloud) if g[0].endswith(f"/serviceAccounts/{email}")}
        assert attach == {f"serviceAccount:{access.functions_account}"}


def test_the_iam_check_catches_a_grant_wider_than_the_declaration(
    cloud: CloudDouble, project: str
) -> None:
    config = config_for(project)
    run(cloud, config)
    email = tenancy.vm_account_email("alice", project)
    bucket = cloud.project_apis.policies["b/acme-spotline"]
    # Someone drops the condition off alice's objects grant.
    for binding in bucket["bindings"]:
        if f"serviceAccount:{email}" in binding["members"] and binding.get("condition"):
            binding.pop("condition")
    granted = users_grants(cloud, project)
    wanted = {declared(b) for b in iam.user_bindings(config.iam_config, PROJECT_NUMBER)}

    assert granted - wanted == {
        ("acme-spotline", "roles/storage.objectUser", f"serviceAccount:{email}", "")
    }


def test_the_iam_check_catches_a_vm_account_publishing_on_another_users_topic(
    cloud: CloudDouble, project: str
) -> None:
    config = config_for(project)
    run(cloud, config)
    email = tenancy.vm_account_email("alice", project)
    for topic in ("spotline-epoch-done-u-bob", "spotline-epoch-done"):
        # (No one publishes on the shared one in this mode: it has no policy yet.)
        policy = cloud.project_apis.policies.setdefault(f"projects/{project}/topics/{topic}", {})
        policy.setdefault("bindings", []).append(
            {"role": "roles/pubsub.publisher", "members": [f"serviceAccount:{email}"]}
        )
    granted = users_grants(cloud, project)
    wanted = {declared(b) for b in iam.user_bindings(config.iam_config, PROJECT_NUMBER)}

    assert granted - wanted == {
        (
            f"projects/{project}/topics/{topic}",
            "roles/pubsub.publisher",
            f"serviceAccount:{email}",
            "",
        )
        for topic in ("spotline-epoch-done-u-bob", "spotline-epoch-done")
    }


def test_the_network_lets_nothing_in_and_the_functions_may_make_gang_rules(
    cloud: CloudDouble, project: str
) -> None:
    """Before, deploy made one rule per user account: a user's VMs reached
    every VM of that user, other jobs' rendezvous included. Now deploy makes
    no rule; the functions make one per gang attempt, under a role of their own."""
    config = config_for(project)
    actions = run(cloud, config)

    [made] = cloud.requests_to("POST", "/global/networks")
    assert schema_problems("Network", made.body) == []
    assert made.body == {
        "name": "spotline",
        "description": made.body["description"],
        "autoCreateSubnetworks": True,
    }
    assert actions["network spotline"] == "created"
    # No rule: nothing reaches a VM (the implied rule denies all ingress) but its gang's.
    assert cloud.requests_to("POST", "/global/firewalls") == []
    role = custom_roles.GANG_FIREWALLS
    assert cloud.project_apis.roles[role.role_id]["includedPermissions"] == list(role.permissions)
    functions = f"serviceAccount:{config.iam_config.functions_account}"
    assert (f"projects/{project}", role.name(project), functions, "") in on_wire(cloud)

    again = run(cloud, config)
    assert {v for k, v in again.items() if k.startswith(("network", "role"))} == {"unchanged"}
    # Every call is a method of the discovery document, by its verb and path.
    calls = [r for r in cloud.requests if r.path.startswith("/compute/")]
    methods = {discovery_method(r.method, r.path) for r in calls}
    assert methods == {"networks.get", "networks.insert", "firewalls.list"}


def _rule(project: str, name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "network": f"https://www.googleapis.com/compute/v1/projects/{project}/global/networks/spotline",
        "direction": "INGRESS",
        "allowed": [{"IPProtocol": "tcp"}],
        **fields,
    }


def test_an_earlier_deploy_s_peer_rules_go_and_the_gangs_rules_stay(
    cloud: CloudDouble, project: str
) -> None:
    run(cloud, config_for(project))
    peer = f"spotline-peers-{tenancy.vm_account_id('alice')}"
    email = tenancy.vm_account_email("alice", project)
    cloud.network.firewalls[peer] = _rule(
        project, peer, sourceServiceAccounts=[email], targetServiceAccounts=[email]
    )
    gang = "sl-job1-a1"
    cloud.network.firewalls[gang] = _rule(project, gang, sourceTags=[gang], targetTags=[gang])

    actions = run(cloud, config_for(project))

    assert actions[f"firewall {peer}"] == "deleted"
    assert set(cloud.network.firewalls) == {gang}  # the functions' to delete, not deploy's


def test_a_dry_run_on_a_bare_project_says_what_it_would_make(
    cloud: CloudDouble, project: str
) -> None:
    from spotline.infra.deploy.bootstrap import ProjectSetup

    setup = ProjectSetup(config_for(project), endpoints=cloud.endpoints(), dry_run=True)
    setup.network.ensure()
    setup.custom_roles.ensure()

    assert [(c.kind, c.action) for c in setup.changes] == [
        ("network", "would create"),
        ("role", "would create"),
    ]
    assert cloud.network.networks == {} and cloud.project_apis.roles == {}


def test_destroy_removes_the_users_accounts_their_grants_and_the_network(
    cloud: CloudDouble, project: str
) -> None:
    config = config_for(project)
    run(cloud, config)
    gang = "sl-job1-a1"  # left by a crash
    cloud.network.firewalls[gang] = _rule(project, gang, sourceTags=[gang], targetTags=[gang])

    Destroyer(config, endpoints=cloud.endpoints()).run()

    assert not [e for e in cloud.project_apis.accounts if e.startswith("slvm-")]
    users = {f"serviceAccount:{tenancy.vm_account_email(u, project)}" for u in ("alice", "bob")}
    # A topic's policy goes with the topic (in the emulator, not the double).
    left: set[Any] = {g for g in on_wire(cloud) if g[2] in users and "/topics/" not in g[0]}
    assert left == set()
    assert cloud.network.networks == {} and cloud.network.firewalls == {}
    deletes = [r for r in cloud.requests_to("DELETE", "") if r.path.startswith("/compute/")]
    assert {discovery_method(r.method, r.path) for r in deletes} == {
        "firewalls.delete",
        "networks.delete",
    }
    assert cloud.project_apis.roles[custom_roles.GANG_FIREWALLS.role_id]["deleted"] is True


def test_in_the_per_user_mode_the_shared_vm_account_holds_nothing(
    cloud: CloudDouble, project: str
) -> None:
    """Every VM runs as its user's account in that mode; the shared account
    kept its rights (every job's folder, every VM topic) for nothing: a second
    identity a leak of it would hand over. One granted by an earlier deploy in
    the shared-topics mode loses them."""
    shared = deploy_config(project)
    run(cloud, shared)
    vm = f"serviceAccount:{shared.iam_config.vm_account}"

    def held() -> set[tuple[str, str]]:
        return {(g[0], g[1]) for g in on_wire(cloud) if g[2] == vm}

    assert held()  # the shared-topics mode's VMs run as it
    attach = f"projects/{project}/serviceAccounts/{shared.iam_config.vm_account}"
    assert any(g[0] == attach for g in on_wire(cloud))

    run(cloud, config_for(project))

    assert held() == set()
    assert not [g for g in on_wire(cloud) if g[0] == attach]  # nor may anyone attach it
    assert iam.shared_vm_bindings(config_for(project).iam_config)  # what was revoked
    assert not set(iam.shared_vm_bindings(config_for(project).iam_config)) & set(
        iam.bindings(config_for(project).iam_config)
    )


def test_a_deploy_takes_the_users_accounts_off_the_shared_vm_event_topics(
    cloud: CloudDouble, project: str
) -> None:
    """An earlier deploy granted each user's VM account publisher on the shared
    VM event topics; the next one leaves it only on the user's own."""
    config = config_for(project)
    run(cloud, config)
    email = tenancy.vm_account_email("alice", project)
    shared = f"projects/{project}/topics/spotline-epoch-done"
    earlier = {"role": "roles/pubsub.publisher", "members": [f"serviceAccount:{email}"]}
    cloud.project_apis.policies.setdefault(shared, {}).setdefault("bindings", []).append(earlier)

    run(cloud, config)

    granted = users_grants(cloud, project)
    wanted = {declared(b) for b in iam.user_bindings(config.iam_config, PROJECT_NUMBER)}
    assert granted == wanted
