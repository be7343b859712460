"""A job with Secret Manager references takes only a held VM whose token can
read secrets (created for such a job): a cooling VM without the scope is left
to its period, and the job gets a new VM."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import Heartbeat, JobFinished
from tests.conftest import SPEC, vm_event

pytestmark = pytest.mark.emulators
COOL = {**SPEC, "cool_down_period_s": 600}
SECRETS = {"env": {"HF_TOKEN": "sm://hf-token"}}


def finish_first_job(call: Callable[..., Any], spec: dict[str, Any]) -> None:
    call("submit_job", "submit", spec, message_id="s1")
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING"), message_id="h1")
    call("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0), message_id="f1")


@pytest.mark.parametrize(
    ("first", "second", "reused"),
    [
        ({}, SECRETS, False),  # the cooling VM's token cannot read secrets
        (SECRETS, SECRETS, True),
        (SECRETS, {}, True),  # a job without secrets may take any
        ({}, {}, True),
    ],
)
def test_a_job_with_secrets_reuses_only_a_vm_that_can_read_them(
    call: Callable[..., Any],
    host: LocalCloud,
    project: str,
    first: dict[str, Any],
    second: dict[str, Any],
    reused: bool,
) -> None:
    finish_first_job(call, {**COOL, **first})
    call("submit_job", "submit", {**COOL, **second, "job_id": "job2"}, message_id="s2")

    job = FirestoreStore(project).get_job("job2")
    assert job is not None
    assert (job.instance == "sl-job1-a1") is reused
    assert len(host.list()) == (1 if reused else 2)
