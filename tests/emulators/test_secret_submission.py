"""Secret-like env variables at submission, through the real functions
framework on the Firestore emulator: a literal value is refused and appears
in no document and no log line; a Secret Manager reference is taken, and only
the reference is stored and sent to the VM."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.assignment import Assignment
from spotline.shared.domain.vms import JOB_METADATA_KEY
from tests.conftest import SPEC

pytestmark = pytest.mark.emulators
VALUE = "hf_s3cr3tVALUEnobodyMayRead"


def everything_stored(project: str) -> str:
    """Every document of the project's collections, as text."""
    from google.cloud import firestore

    client = firestore.Client(project=project)
    return json.dumps(
        [doc.to_dict() for collection in client.collections() for doc in collection.stream()],
        default=str,
    )


@pytest.mark.parametrize(
    "spec",
    [
        {**SPEC, "env": {"HF_TOKEN": VALUE, "HF_HOME": "/data"}},
        # Invalid for another reason too: the rejection keeps the payload's start.
        {**SPEC, "epochs": "many", "env": {"HF_TOKEN": VALUE}},
    ],
)
def test_a_literal_secret_is_rejected_and_stored_nowhere(
    call: Callable[..., Any],
    host: LocalCloud,
    project: str,
    spec: dict[str, Any],
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert call("submit_job", "submit", spec, message_id="s1").status_code == 200
    store = FirestoreStore(project)
    rejection = store.get_rejection("s1")
    assert rejection is not None and store.list_jobs() == [] and host.list() == []
    if "epochs" not in spec:
        assert "env.HF_TOKEN: the name looks like a secret" in rejection.reason
        assert "HF_TOKEN=sm://NAME" in rejection.reason
    assert '"HF_TOKEN": "***"' in rejection.payload
    assert VALUE not in everything_stored(project)
    out, err = capfd.readouterr()
    assert VALUE not in out + err


def test_a_reference_is_taken_and_only_it_is_stored(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    env = {"HF_TOKEN": "sm://hf-token", "DB_PASSWORD": "sm://projects/other-proj/secrets/db"}
    assert call("submit_job", "submit", {**SPEC, "env": env}).status_code == 200
    job = FirestoreStore(project).get_job("job1")
    assert job is not None and job.spec.env == env
    (vm,) = host.list()
    assert Assignment.model_validate_json(vm["metadata"][JOB_METADATA_KEY]).spec.env == env
