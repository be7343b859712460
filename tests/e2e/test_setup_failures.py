"""A job whose inputs cannot exist on any VM fails at once, naming them.

A relative ``code_uri`` means nothing on a VM: refused with the spec. A
location where nothing is stored is named by the client before it publishes;
published anyway (``gcloud pubsub topics publish`` checks nothing), the VM's
agent reports that it could not start the trainer, and since no new VM can
fix it, the job FAILS on its first VM whatever its restarts on errors allow,
instead of stalling one VM after another.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import spotline
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import JobFinished
from spotline.shared.domain.late_finish import job_finished
from spotline.shared.domain.lifecycle import new_job, vm_recorded
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.transitions import move_job
from tests.e2e.test_e2e_recovery import submit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("field", ["code_uri", "data_uri"])
def test_a_relative_location_is_refused_naming_what_to_do(field: str) -> None:
    fields = {"user": "alice", "machine_ids": ["g2-standard-4"], "command": ["python", "t.py"]}
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({**fields, field: "./src"})
    message = str(refused.value)
    assert f"{field}: './src' is a relative path" in message
    assert ("--code-dir" if field == "code_uri" else "--data-dir") in message


def training(**spec: Any) -> Any:
    job = new_job(
        JobSpec(user="alice", machine_ids=["g2-standard-4"], command=["train"], **spec),
        "job1", "m1", T0,
    )  # fmt: skip
    job = vm_recorded(job, "sl-job1-a1", "zone-a", "g2-standard-4", T0 + timedelta(seconds=1))
    return move_job(job, JobSubstatus.TRAINING, T0 + timedelta(seconds=2))


def test_a_failure_no_new_vm_can_fix_spends_no_restart() -> None:
    cause = "cannot start the trainer: code_uri gs://b/missing: nothing is stored there"
    event = JobFinished(
        job_id="job1", attempt=1, instance="sl-job1-a1", sent_at=T0 + timedelta(seconds=9),
        exit_code=1, log_tail=cause + "\n", unrecoverable=True,
    )  # fmt: skip

    job = job_finished(training(max_restarts_on_errors=3), event, T0 + timedelta(seconds=10))

    assert (job.status, job.attempt, job.restarts_on_errors) == (JobStatus.FAILED, 1, 0)
    assert job.error is not None and cause in job.error
    assert "no new VM can fix" in job.error


@pytest.mark.emulators
@pytest.mark.e2e
def test_a_published_job_with_no_code_at_its_code_uri_fails_on_its_first_vm(
    local_stack: LocalStack,
) -> None:
    missing = f"{local_stack.client_env()['SPOTLINE_STORAGE_ROOT']}/nothing-here/code"
    job_id = submit(
        local_stack, trainer=None, command=["python", "train.py"], code_uri=missing,
        max_restarts_on_errors=3,
    )  # fmt: skip
    store = FirestoreStore(local_stack.options.project)

    job = wait_for_job(store, job_id, 60, echo=False)

    assert job.status == JobStatus.FAILED, job
    assert len(job.attempts) == 1 and job.restarts_on_errors == 0
    assert job.error is not None and f"code_uri {missing}: nothing is stored there" in job.error


@pytest.mark.emulators
@pytest.mark.e2e
def test_the_client_names_a_location_with_nothing_stored_and_publishes_nothing(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    missing = f"{local_stack.client_env()['SPOTLINE_STORAGE_ROOT']}/nothing-here/code"
    spec = {
        "user": "nothing-stored",
        "machine_ids": ["g2-standard-4"],
        "command": ["python", "t.py"],
        "code_uri": missing,
        "data_uri": str(tmp_path / "no-data"),
    }
    (tmp_path / "job.json").write_text(json.dumps(spec))
    store = FirestoreStore(local_stack.options.project)

    with pytest.raises(spotline.SpecError) as refused:
        spotline.submit(tmp_path / "job.json")

    problems = refused.value.problems
    assert any(f"code_uri: nothing is stored at {missing}" in p for p in problems), problems
    assert any("data_uri: nothing is stored at" in p for p in problems), problems
    assert store.recent_jobs(5, user="nothing-stored") == []


def test_a_gang_node_whose_trainer_never_started_fails_the_job_at_once() -> None:
    # A non-zero exit of a gang's node is held for the notice window, as a
    # peer's preemption may explain it; a trainer that never started did not
    # die in a collective, so the job fails now.
    nodes = ["sl-job1-a1-n0", "sl-job1-a1-n1"]
    job = new_job(
        JobSpec(user="alice", machine_ids=["g2-standard-4"], command=["train"], nodes=2),
        "job1", "m1", T0,
    )  # fmt: skip
    job = vm_recorded(job, nodes[0], "zone-a", "g2-standard-4", T0, nodes=nodes)
    job = move_job(job, JobSubstatus.TRAINING, T0 + timedelta(seconds=2))
    event = JobFinished(
        job_id="job1", attempt=1, instance=nodes[1], sent_at=T0 + timedelta(seconds=9),
        exit_code=1, log_tail="cannot start the trainer: code_uri gs://b/x: nothing is stored",
        unrecoverable=True,
    )  # fmt: skip

    job = job_finished(job, event, T0 + timedelta(seconds=10))

    assert job.status == JobStatus.FAILED and job.held_finish is None
