"""The claim behind the rules deploy releases (``infra/deploy/firestore.rules``),
shown on the real Firestore emulator: with them in force a client SDK's request,
which security rules govern, is refused for every read and write of a job,
while the server client library the functions use (IAM-authorized; rules do not
apply to it) reads and writes as before.

The emulator takes a project's rules at ``PUT /emulator/v1/projects/P:securityRules``
(as the Firebase CLI loads them) and treats a request bearing ``Bearer owner``
as an admin's; a request with no such header is a client SDK's, signed out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from spotline.infra.deploy.rules import RULES_FILE
from spotline.infra.localstack.emulators import Emulator
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from tests.store_contract import a_job

pytestmark = pytest.mark.emulators


def rules_url(host: str, project: str) -> str:
    return f"http://{host}/emulator/v1/projects/{project}:securityRules"


@pytest.fixture
def firestore_host(emulators: tuple[Emulator, Emulator]) -> str:
    return emulators[0].host


@pytest.fixture
def deny_all(firestore_host: str, project: str) -> Iterator[None]:
    """The rules file in force for ``project`` during the test; what was in force
    before (the emulator's open rules) again after."""
    url = rules_url(firestore_host, project)
    before = requests.get(url, timeout=10)
    before.raise_for_status()
    loaded = requests.put(
        url,
        json={"rules": {"files": [{"name": "firestore.rules", "content": RULES_FILE.read_text()}]}},
        timeout=30,
    )
    assert loaded.status_code == 200, loaded.text  # the emulator compiled them
    try:
        yield
    finally:
        requests.put(url, json=before.json(), timeout=30).raise_for_status()


def client_request(
    firestore_host: str, project: str, method: str, path: str, **kwargs: object
) -> requests.Response:
    """A request as a client SDK sends it: Firestore's REST API, no admin token."""
    url = f"http://{firestore_host}/v1/projects/{project}/databases/(default)/documents/{path}"
    return requests.request(method, url, timeout=10, **kwargs)  # type: ignore[arg-type]


def refused(answer: requests.Response) -> bool:
    return answer.status_code == 403 and answer.json()["error"]["status"] == "PERMISSION_DENIED"


def test_without_the_rules_a_signed_out_client_reads_jobs(
    firestore_host: str, project: str
) -> None:
    """What the rules close: the emulator's (and a test-mode database's) open rules."""
    FirestoreStore(project).create_job(a_job())

    answer = client_request(firestore_host, project, "GET", "jobs/job1")

    assert answer.status_code == 200 and "fields" in answer.json()


def test_the_rules_refuse_every_client_read_and_write_of_a_job(
    firestore_host: str, project: str, deny_all: None
) -> None:
    store = FirestoreStore(project)
    assert store.create_job(a_job())
    fields = {"fields": {"status": {"stringValue": "CANCELED"}}}

    attempts = {
        "get": client_request(firestore_host, project, "GET", "jobs/job1"),
        "list": client_request(firestore_host, project, "GET", "jobs"),
        "update": client_request(firestore_host, project, "PATCH", "jobs/job1", json=fields),
        "create": client_request(firestore_host, project, "PATCH", "jobs/job2", json=fields),
        "delete": client_request(firestore_host, project, "DELETE", "jobs/job1"),
        "other collection": client_request(firestore_host, project, "GET", "machines/x"),
    }

    assert {what: refused(answer) for what, answer in attempts.items()} == dict.fromkeys(
        attempts, True
    ), {what: answer.text[:200] for what, answer in attempts.items()}
    # Nothing was written through them; the server client reads and writes on.
    job = store.get_job("job1")
    assert job is not None and job.status == JobStatus.QUEUING
    assert store.get_job("job2") is None
    updated = store.update_job("job1", lambda j: j.model_copy(update={"preemptions": 1}))
    assert updated is not None and updated.preemptions == 1
    assert store.create_job(a_job("job3"))
    assert {j.job_id for j in store.list_jobs()} == {"job1", "job3"}
