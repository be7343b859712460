"""The command line after `spotline deploy`: the config file names the project,
no variable and no local stack do, and the CLI reaches the deployed project (the
Pub/Sub and Firestore emulators in its place); a function with bad settings
asks for redelivery. How settings are read is in ``tests/unit/test_settings.py``."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from spotline.functions import deps
from spotline.infra.cli.commands import main
from spotline.infra.cli.exit_codes import Exit
from spotline.infra.localstack.emulators import Emulator
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import CancelRequest
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec
from spotline.shared.settings_file import config_path, write_config
from tests.conftest import SPEC


@pytest.fixture
def deployed_only(
    emulators: tuple[Emulator, Emulator], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Path:
    """A shell after `spotline deploy`: a config file, no SPOTLINE_ variable, no
    local stack; the Pub/Sub client pointed at the emulator in place of Google."""
    for name in [n for n in os.environ if n.startswith("SPOTLINE_") or "EMULATOR" in n]:
        if name != "SPOTLINE_CONFIG":
            monkeypatch.delenv(name)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulators[1].host)
    path = config_path(os.environ)
    assert path is not None
    return path


def cancel_subscription(project: str) -> str:
    topic = f"projects/{project}/topics/spotline-cancel"
    PublisherClient().create_topic(name=topic)
    subscription = f"projects/{project}/subscriptions/cancels"
    SubscriberClient().create_subscription(name=subscription, topic=topic)
    return subscription


def pulled_cancels(subscription: str) -> list[CancelRequest]:
    response = SubscriberClient().pull(subscription=subscription, max_messages=10, timeout=10)
    return [CancelRequest.model_validate_json(m.message.data) for m in response.received_messages]


def a_running_job(project: str, job_id: str, firestore_host: str) -> None:
    """A job of ``project`` that has not ended, in the emulator at ``firestore_host``
    (what `status` lists and `cancel` looks up first)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FIRESTORE_EMULATOR_HOST", firestore_host)
        spec = JobSpec(user="ada", machine_ids=["g2-standard-4"], trainer="digits_mlp")
        FirestoreStore(project).create_job(new_job(spec, job_id, "m1", datetime.now(UTC)))


def test_cancel_publishes_to_the_deployed_project_from_the_config_file(
    deployed_only: Path,
    emulators: tuple[Emulator, Emulator],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = f"acme-{uuid.uuid4().hex[:8]}"
    write_config(deployed_only, {"project": project, "region": "us-east1"})
    subscription = cancel_subscription(project)
    a_running_job(project, "job-7", emulators[0].host)
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulators[0].host)

    assert main(["--workdir", str(tmp_path / "no-stack"), "cancel", "job-7"]) == 0

    assert "cancel of job-7 published" in capsys.readouterr().out
    [request] = pulled_cancels(subscription)
    assert request.job_id == "job-7"


def test_a_local_stack_in_the_workdir_wins_over_the_config_file(
    deployed_only: Path, emulators: tuple[Emulator, Emulator], tmp_path: Path
) -> None:
    project, local_project = f"acme-{uuid.uuid4().hex[:8]}", f"local-{uuid.uuid4().hex[:8]}"
    write_config(deployed_only, {"project": project, "region": "us-east1"})
    deployed, local = cancel_subscription(project), cancel_subscription(local_project)
    a_running_job(local_project, "job-8", emulators[0].host)
    # What a running `spotline up` leaves in its workdir (LocalStack._write_stack_file).
    stack = {
        "SPOTLINE_PROJECT": local_project,
        "PUBSUB_EMULATOR_HOST": os.environ["PUBSUB_EMULATOR_HOST"],
        "FIRESTORE_EMULATOR_HOST": emulators[0].host,
    }
    (tmp_path / "stack.json").write_text(json.dumps({"env": stack, "workdir": str(tmp_path)}))

    assert main(["--workdir", str(tmp_path), "cancel", "job-8"]) == 0

    assert [r.job_id for r in pulled_cancels(local)] == ["job-8"]
    assert pulled_cancels(deployed) == []


def test_status_lists_the_jobs_of_the_deployed_project(
    deployed_only: Path,
    emulators: tuple[Emulator, Emulator],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = f"acme-{uuid.uuid4().hex[:8]}"
    write_config(deployed_only, {"project": project, "region": "us-east1"})
    a_running_job(project, "job-of-ada", emulators[0].host)
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulators[0].host)

    assert main(["--workdir", str(tmp_path), "status"]) == 0

    assert "job-of-ada" in capsys.readouterr().out


def test_a_function_with_a_bad_setting_logs_every_bad_one_and_asks_for_redelivery(
    call: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SPOTLINE_MAX_EVENT_AGE_S", "an hour")
    monkeypatch.setenv("SPOTLINE_MAX_ACTIVE_JOBS", "0")
    deps.reset()
    try:
        assert call("submit_job", "submit", SPEC).status_code == 500
    finally:
        deps.reset()

    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line[:1] == "{"]
    [error] = [r for r in records if r.get("severity") == "ERROR" and "problems" in r]
    assert error["message"].startswith("spotline: 2 bad settings:")
    assert any("SPOTLINE_MAX_EVENT_AGE_S='an hour'" in p for p in error["problems"])
    assert any("SPOTLINE_MAX_ACTIVE_JOBS='0'" in p for p in error["problems"])


def test_with_no_stack_and_no_config_the_cli_says_what_to_run(
    deployed_only: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not deployed_only.exists()

    assert main(["--workdir", str(tmp_path), "status"]) == Exit.NOT_CONNECTED
    assert "run `spotline up`, or `spotline deploy`" in capsys.readouterr().err
