"""Deploy puts deny-all Firestore security rules in force, shown by the requests
the Firebase Rules API double records: the release ``cloud.firestore`` points
at a ruleset whose source is ``infra/deploy/firestore.rules``; a second deploy
only reads; rules someone else released are replaced; a dry run reads only;
destroy removes the release and spotline's ruleset, and nothing of anyone else's.

That those rules refuse a client SDK while the functions' server client goes on
is shown against the Firestore emulator in ``test_firestore_rules.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spotline.infra.deploy.bootstrap import SERVICES
from spotline.infra.deploy.deployer import Deployer
from spotline.infra.deploy.destroy import Destroyer
from spotline.infra.deploy.rules import RULES_FILE
from spotline.infra.localcloud.wire import RecordedRequest
from spotline.infra.localstack.emulators import Emulator
from tests.cloud_double import CloudDouble
from tests.deploy_cli import DeployCli
from tests.emulators.test_deploy import REGION, deploy_config

pytestmark = pytest.mark.emulators
OPEN_RULES = (
    "rules_version = '2';\nservice cloud.firestore { match /databases/{database}/documents "
    "{ match /{document=**} { allow read, write: if true; } } }"
)


@pytest.fixture
def cloud(project: str, emulators: tuple[Emulator, Emulator]) -> Iterator[CloudDouble]:
    with CloudDouble(project, REGION, pubsub_host=emulators[1].host) as double:
        yield double


def release_name(project: str) -> str:
    return f"projects/{project}/releases/cloud.firestore"


def rules_requests(cloud: CloudDouble, since: int = 0) -> list[RecordedRequest]:
    """The requests to the Rules API (its paths name releases or rulesets)."""
    return [r for r in cloud.requests[since:] if "/releases" in r.path or "/rulesets" in r.path]


def released_source(cloud: CloudDouble, project: str) -> str:
    """The source of the ruleset the Firestore release points at."""
    release = cloud.rules.releases[release_name(project)]
    [file] = cloud.rules.rulesets[release["rulesetName"]]["source"]["files"]
    return str(file["content"])


def deploy(cloud: CloudDouble, project: str) -> dict[str, str]:
    changes = Deployer(
        deploy_config(project), endpoints=cloud.endpoints(), operation_timeout_s=30
    ).run()
    return {f"{c.kind} {c.name}": c.action for c in changes}


def open_rules_released(cloud: CloudDouble, project: str) -> str:
    """A project whose Firestore was made in test mode: open rules, released.
    Returns that ruleset's name."""
    name = f"projects/{project}/rulesets/test-mode"
    cloud.rules.rulesets[name] = {
        "name": name,
        "source": {"files": [{"name": "firestore.rules", "content": OPEN_RULES}]},
    }
    cloud.rules.releases[release_name(project)] = {
        "name": release_name(project),
        "rulesetName": name,
    }
    return name


def test_the_rules_file_denies_every_read_and_write() -> None:
    lines = RULES_FILE.read_text().splitlines()
    words = " ".join(" ".join(line for line in lines if not line.startswith("//")).split())
    assert words.startswith("rules_version = '2'; service cloud.firestore {")
    assert "match /{document=**} { allow read, write: if false; }" in words
    assert words.count("allow") == 1


def test_a_first_deploy_releases_the_deny_all_rules(cloud: CloudDouble, project: str) -> None:
    actions = deploy(cloud, project)

    assert "firebaserules.googleapis.com" in SERVICES
    assert "firebaserules.googleapis.com" in cloud.project_apis.enabled
    read, create_ruleset, create_release = rules_requests(cloud)
    assert (read.method, read.path) == ("GET", f"/v1/{release_name(project)}")
    assert (create_ruleset.method, create_ruleset.path) == (
        "POST",
        f"/v1/projects/{project}/rulesets",
    )
    assert create_ruleset.body == {
        "source": {"files": [{"name": "firestore.rules", "content": RULES_FILE.read_text()}]}
    }
    [ruleset] = cloud.rules.rulesets
    assert (create_release.method, create_release.path) == (
        "POST",
        f"/v1/projects/{project}/releases",
    )
    assert create_release.body == {"name": release_name(project), "rulesetName": ruleset}
    assert released_source(cloud, project) == RULES_FILE.read_text()
    assert actions["rules cloud.firestore"] == "created"


def test_a_second_deploy_only_reads_the_rules(cloud: CloudDouble, project: str) -> None:
    deploy(cloud, project)
    before = len(cloud.requests)

    actions = deploy(cloud, project)

    again = rules_requests(cloud, before)
    assert [(r.method, r.path) for r in again] == [
        ("GET", f"/v1/{release_name(project)}"),
        ("GET", f"/v1/{cloud.rules.releases[release_name(project)]['rulesetName']}"),
    ]
    assert len(cloud.rules.rulesets) == 1
    assert actions["rules cloud.firestore"] == "unchanged"


def test_open_rules_someone_released_are_replaced(cloud: CloudDouble, project: str) -> None:
    theirs = open_rules_released(cloud, project)

    actions = deploy(cloud, project)

    [patch] = [r for r in rules_requests(cloud) if r.method == "PATCH"]
    assert patch.path == f"/v1/{release_name(project)}"
    ours = cloud.rules.releases[release_name(project)]["rulesetName"]
    assert ours != theirs
    assert patch.body["release"] == {"name": release_name(project), "rulesetName": ours}
    assert released_source(cloud, project) == RULES_FILE.read_text()
    # Their ruleset stays in the project's history (the console can roll back to it).
    assert theirs in cloud.rules.rulesets
    assert actions["rules cloud.firestore"] == "updated"


def test_dry_run_says_what_it_would_do_to_the_rules_and_writes_nothing(
    cloud: CloudDouble,
    project: str,
    deploy_cli: DeployCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert deploy_cli.deploy("--dry-run") == 0
    assert "rules cloud.firestore would create" in " ".join(capsys.readouterr().out.split())
    open_rules_released(cloud, project)

    assert deploy_cli.deploy("--dry-run") == 0

    assert "rules cloud.firestore would update" in " ".join(capsys.readouterr().out.split())
    assert cloud.writes() == []
    assert deploy_cli.deploy() == 0
    capsys.readouterr()
    assert deploy_cli.deploy("--dry-run") == 0
    assert "rules cloud.firestore unchanged" in " ".join(capsys.readouterr().out.split())


def test_destroy_removes_the_release_and_spotlines_ruleset(
    cloud: CloudDouble, project: str
) -> None:
    deploy(cloud, project)
    [ours] = cloud.rules.rulesets
    before = len(cloud.requests)

    changes = Destroyer(deploy_config(project), endpoints=cloud.endpoints()).run()

    deletes = [r.path for r in rules_requests(cloud, before) if r.method == "DELETE"]
    assert deletes == [f"/v1/{release_name(project)}", f"/v1/{ours}"]
    assert cloud.rules.releases == {} and cloud.rules.rulesets == {}
    assert [c.action for c in changes if c.kind == "rules"] == ["deleted"]
    writes = len(cloud.writes())
    again = Destroyer(deploy_config(project), endpoints=cloud.endpoints()).run()
    assert cloud.writes()[writes:] == []
    assert [c.action for c in again if c.kind == "rules"] == ["absent"]


def test_destroy_dry_run_and_rules_spotline_did_not_write(cloud: CloudDouble, project: str) -> None:
    deploy(cloud, project)
    writes = len(cloud.writes())
    dry = Destroyer(deploy_config(project), endpoints=cloud.endpoints(), dry_run=True).run()
    assert [c.action for c in dry if c.kind == "rules"] == ["would delete"]
    assert cloud.writes()[writes:] == []
    # Someone released rules of their own since: destroy leaves them in force.
    theirs = open_rules_released(cloud, project)

    changes = Destroyer(deploy_config(project), endpoints=cloud.endpoints()).run()

    assert cloud.rules.releases[release_name(project)]["rulesetName"] == theirs
    assert theirs in cloud.rules.rulesets
    [kept] = [c for c in changes if c.kind == "rules"]
    assert kept.action == "kept" and theirs in kept.detail


def test_a_users_adc_names_the_project_as_quota_project_on_every_rules_call(
    cloud: CloudDouble, project: str
) -> None:
    # As `gcloud auth application-default login` leaves them: no quota project.
    # Firebase Rules bills the caller, and refuses a user who names none.
    user = cloud.user_credentials()
    assert user.quota_project_id is None

    Deployer(
        deploy_config(project),
        endpoints=cloud.endpoints(),
        credentials=user,
        operation_timeout_s=30,
    ).run()
    Destroyer(deploy_config(project), endpoints=cloud.endpoints(), credentials=user).run()

    calls = rules_requests(cloud)
    assert {r.method for r in calls} == {"GET", "POST", "DELETE"}
    assert all(r.headers["authorization"] == f"Bearer {user.token}" for r in calls)
    assert {r.headers.get("x-goog-user-project") for r in calls} == {project}
    # The resource-based APIs bill the project they act on: no header is sent there.
    others = [r for r in cloud.requests if r not in calls and "authorization" in r.headers]
    assert others and not [r for r in others if "x-goog-user-project" in r.headers]


def test_the_rules_api_refuses_a_user_with_no_quota_project_as_google_does(
    cloud: CloudDouble, project: str
) -> None:
    import requests

    user = cloud.user_credentials()
    url = f"{cloud.endpoint}/v1/{release_name(project)}"
    bearer = {"authorization": f"Bearer {user.token}"}

    refused = requests.get(url, headers=bearer, timeout=10)

    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["status"] == "PERMISSION_DENIED"
    assert "The firebaserules.googleapis.com API requires a quota project" in error["message"]
    [info] = error["details"]
    assert (info["reason"], info["metadata"]["service"]) == (
        "SERVICE_DISABLED",
        "firebaserules.googleapis.com",
    )
    # A quota project the caller may use, with the API on, is billed.
    other = requests.get(url, headers={**bearer, "x-goog-user-project": "elsewhere"}, timeout=10)
    assert other.status_code == 403 and "serviceusage.services.use" in other.text
    off = requests.get(url, headers={**bearer, "x-goog-user-project": project}, timeout=10)
    assert off.status_code == 403 and "disabled" in off.text
    cloud.project_apis.enabled.add("firebaserules.googleapis.com")
    billed = requests.get(url, headers={**bearer, "x-goog-user-project": project}, timeout=10)
    assert billed.status_code == 404  # no release yet: past the billing check
    # A service account's token is billed to its own project: no header needed.
    assert requests.get(url, headers={"authorization": "Bearer sa"}, timeout=10).status_code == 404


def test_only_a_persons_credentials_get_the_project_as_quota_project() -> None:
    from google.auth import compute_engine
    from google.oauth2.credentials import Credentials

    from spotline.infra.deploy.clients import billed_to

    for person in (Credentials(token="t"), Credentials(token="t", quota_project_id="other")):
        headers: dict[str, str] = {}
        billed_to(person, "acme").apply(headers)
        assert headers["x-goog-user-project"] == "acme"
    # A service account (here the metadata server's) bills its own project.
    machine = compute_engine.Credentials()
    assert billed_to(machine, "acme") is machine
