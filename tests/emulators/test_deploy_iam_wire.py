"""Least privilege as granted on the wire by a whole deploy (the declarations:
tests/unit/test_deploy_iam.py), Pub/Sub on its emulator."""

from __future__ import annotations

import pytest

from spotline.infra.deploy import custom_roles, iam
from spotline.infra.deploy.deployer import Deployer
from spotline.infra.deploy.plan import DeployConfig
from spotline.infra.localstack.emulators import Emulator
from spotline.shared.settings import Settings
from tests.cloud_double import CloudDouble
from tests.unit.test_deploy_iam import BROAD, CUSTOM_PERMISSIONS, SUBMITTER, allowed


@pytest.mark.emulators
def test_a_deploy_grants_exactly_the_declared_bindings_on_the_wire(
    project: str, emulators: tuple[Emulator, Emulator]
) -> None:
    pubsub = emulators[1]
    settings = Settings(
        project=project,
        region="us-central1",
        storage_root="gs://acme-spotline/runs",
        image=f"projects/{project}/global/images/family/spotline-agent",
        service_account=iam.VM_ACCOUNT.email(project),
    )
    config = DeployConfig(settings, iam.FUNCTIONS_ACCOUNT.email(project), submitters=(SUBMITTER,))
    with CloudDouble(project, "us-central1", pubsub_host=pubsub.host) as cloud:
        Deployer(config, endpoints=cloud.endpoints(), operation_timeout_s=30).run()
        grants = cloud.project_apis.grants
        policies = cloud.project_apis.policies
        roles = cloud.project_apis.roles

    assert grants and {g.role for g in grants} <= allowed(project)
    # spotline's own role holds what it declares, and nothing a firewall rule does not need.
    assert {r: sorted(v["includedPermissions"]) for r, v in roles.items()} == {
        role.role_id: sorted(role.permissions) for role in custom_roles.ROLES
    }
    assert [p for v in roles.values() for p in v["includedPermissions"]
            if not CUSTOM_PERMISSIONS.fullmatch(p)] == []  # fmt: skip
    assert not [g for g in grants if BROAD.search(g.role)]
    # What the wire granted is what the declaration says, one for one.
    sink = cloud.project_apis.sinks["spotline-preemptions"]["writerIdentity"]
    subscriptions = sorted(
        t["transport"]["pubsub"]["subscription"] for t in cloud.triggers.values()
    )
    declared = [
        *iam.bindings(config.iam_config),
        *iam.dead_letter_bindings(config.iam_config, "123456789012", subscriptions),
        iam.sink_writer_binding(config.iam_config, sink),
    ]
    on_wire = {(g.resource.removeprefix("b/"), g.role, g.member) for g in grants}
    assert on_wire == {(b.resource, str(b.role), b.member) for b in declared}
    conditional = {g.role: g.condition for g in grants if g.condition}
    assert conditional.keys() == {"roles/storage.objectUser", "roles/storage.objectViewer"}
    assert "runs/jobs/" in conditional["roles/storage.objectUser"]
    assert "runs/code/" in conditional["roles/storage.objectViewer"]
    # The project's owner is still its owner.
    project_policy = policies[f"projects/{project}"]["bindings"]
    assert {"role": "roles/owner", "members": ["user:owner@example.com"]} in project_policy
