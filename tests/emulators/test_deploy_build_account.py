"""The account Cloud Build builds the functions as: deploy names ``spotline-build``
in each function's ``buildConfig.serviceAccount`` and grants it Google's Cloud
Run Builder role, so a build in a new project (whose default build account may
hold no role) succeeds; destroy removes both. The functions double fails a build
whose account lacks what a build needs, as Cloud Build does
(``tests/cloud_double_build.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.api_core.exceptions import GoogleAPICallError

from spotline.infra.deploy import iam, plan
from spotline.infra.deploy.deployer import Deployer
from spotline.infra.deploy.destroy import Destroyer
from spotline.infra.deploy.source import build_archive
from spotline.infra.localstack.emulators import Emulator
from spotline.infra.topology import FUNCTIONS
from tests.cloud_double import CloudDouble
from tests.cloud_double_build import DEFAULT_BUILD_ACCOUNT
from tests.cloud_double_wire import mask_paths
from tests.discovery import document
from tests.emulators.test_deploy import REGION, deploy, deploy_config

pytestmark = pytest.mark.emulators


@pytest.fixture
def cloud(project: str, emulators: tuple[Emulator, Emulator]) -> Iterator[CloudDouble]:
    with CloudDouble(project, REGION, pubsub_host=emulators[1].host) as double:
        yield double


def function_name(project: str, function_id: str) -> str:
    return f"projects/{project}/locations/{REGION}/functions/{function_id}"


def test_every_function_is_built_as_spotline_build_with_the_builder_role(
    cloud: CloudDouble, project: str
) -> None:
    deploy(cloud, deploy_config(project))

    email = iam.BUILD_ACCOUNT.email(project)
    assert email in cloud.project_apis.accounts
    named = f"projects/{project}/serviceAccounts/{email}"
    creates = cloud.requests_to("POST", f"/locations/{REGION}/functions")
    assert len(creates) == len(FUNCTIONS)
    assert {r.body["buildConfig"]["serviceAccount"] for r in creates} == {named}
    # The field and its format, as Google's cloudfunctions v2 discovery document gives them.
    field = document("cloudfunctions", "v2")["schemas"]["BuildConfig"]["properties"]
    assert (
        "projects/{projectId}/serviceAccounts/{serviceAccountEmail}"
        in (field["serviceAccount"]["description"])
    )
    assert {f["state"] for f in cloud.functions.values()} == {"ACTIVE"}
    # One role, on the project, to that account; the functions' own account builds nothing.
    held = [g for g in cloud.project_apis.grants if g.member == f"serviceAccount:{email}"]
    assert [(g.resource, g.role) for g in held] == [(f"projects/{project}", "roles/run.builder")]
    fn = f"serviceAccount:{iam.FUNCTIONS_ACCOUNT.email(project)}"
    assert not [g for g in cloud.project_apis.grants if g.member == fn and "build" in g.role]


def test_functions_built_as_the_projects_default_are_moved_to_spotline_build(
    cloud: CloudDouble, project: str
) -> None:
    deploy(cloud, deploy_config(project))
    # Functions deployed before the build account was named (an older spotline).
    for function in cloud.functions.values():
        function["buildConfig"].pop("serviceAccount")
    before = len(cloud.requests)

    actions = deploy(cloud, deploy_config(project))

    patches = [r for r in cloud.requests[before:] if r.method == "PATCH"]
    assert len(patches) == len(FUNCTIONS)
    assert all("buildConfig.serviceAccount" in mask_paths(r.query) for r in patches)
    assert all(actions[f"function {f.function_id}"] == "updated" for f in FUNCTIONS)
    assert deploy(cloud, deploy_config(project))[f"function {FUNCTIONS[0].function_id}"] == (
        "unchanged"
    )


def test_a_build_as_a_new_projects_default_account_fails_as_google_does(
    cloud: CloudDouble, project: str
) -> None:
    config = deploy_config(project)
    deploy(cloud, config)
    function = FUNCTIONS[0]
    desired = plan.desired_function(config, function, "digest")
    desired.build_config.service_account = ""
    deployer = Deployer(config, endpoints=cloud.endpoints(), operation_timeout_s=30)
    desired.build_config.source.storage_source = deployer._upload(build_archive())
    # The default account, with no role: the build fails and the function is FAILED.
    cloud.functions.pop(function_name(project, function.function_id))
    request = plan.create_function_request(config, function, desired)

    with pytest.raises(GoogleAPICallError, match="write logs to Cloud Logging") as failed:
        deployer._functions.create_function(request=request).result(timeout=30)

    assert DEFAULT_BUILD_ACCOUNT in str(failed.value)
    assert cloud.functions[function_name(project, function.function_id)]["state"] == "FAILED"
    # An account with logs but no read of the source fails on the fetch, in Google's words.
    apis = cloud.project_apis
    member = f"serviceAccount:{DEFAULT_BUILD_ACCOUNT}"
    apis.policies[f"projects/{project}"]["bindings"].append(
        {"role": "roles/logging.logWriter", "members": [member]}
    )
    cloud.functions.pop(function_name(project, function.function_id))
    desired.build_config.source.storage_source = deployer._upload(build_archive())
    request = plan.create_function_request(config, function, desired)
    with pytest.raises(GoogleAPICallError, match="You must grant Storage Object Viewer"):
        deployer._functions.create_function(request=request).result(timeout=30)
    # The next deploy builds it again, as spotline-build, and it runs.
    assert deploy(cloud, config)[f"function {function.function_id}"] == "updated"
    assert cloud.functions[function_name(project, function.function_id)]["state"] == "ACTIVE"


def test_destroy_revokes_the_builder_role_and_deletes_the_build_account(
    cloud: CloudDouble, project: str
) -> None:
    deploy(cloud, deploy_config(project))

    changes = Destroyer(deploy_config(project), endpoints=cloud.endpoints()).run()

    email = iam.BUILD_ACCOUNT.email(project)
    assert email not in cloud.project_apis.accounts
    policy = cloud.project_apis.policies[f"projects/{project}"]
    assert not [b for b in policy["bindings"] if f"serviceAccount:{email}" in b["members"]]
    assert "deleted" in [c.action for c in changes if c.name == "spotline-build"]
