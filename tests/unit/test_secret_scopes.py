"""A VM whose job names Secret Manager references gets a token that can
read secrets (Secret Manager has only the cloud-platform scope); every other
VM keeps the narrowed scopes."""

from __future__ import annotations

import pytest

from spotline.shared.adapters.gce_requests import SECRETS_SCOPE, VM_SCOPES, service_accounts
from spotline.shared.contract.assignment import Assignment
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.placement import build_vm_request, options
from spotline.shared.domain.spec import JobSpec


@pytest.mark.parametrize(
    ("env", "scopes"),
    [
        ({}, list(VM_SCOPES)),
        ({"HF_HOME": "/data"}, list(VM_SCOPES)),
        ({"HF_TOKEN": "sm://hf-token", "HF_HOME": "/data"}, [*VM_SCOPES, SECRETS_SCOPE]),
    ],
)
def test_only_a_job_with_secret_references_gets_the_secrets_scope(
    env: dict[str, str], scopes: list[str]
) -> None:
    spec = JobSpec(user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp", env=env)
    assignment = Assignment(
        job_id="j1", attempt=1, project="p", spec=spec, checkpoint_dir="c", output_dir="o"
    )
    option = next(options(spec.machine_ids, ["z"], load_catalog()))
    request = build_vm_request(option, assignment, "img", "alice", "vm@p.iam.gserviceaccount.com")
    (account,) = service_accounts(request)
    assert list(account.scopes) == scopes
