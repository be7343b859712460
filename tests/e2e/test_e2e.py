"""One job from a published message to COMPLETED, on the whole local stack:
emulators, functions-framework servers, push subscriptions, the real agent
and the real digits trainer in a local "VM"."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.pubsub_bus import PubsubBus
from spotline.shared.domain.lifecycle import job_id_for
from spotline.shared.domain.spec import parse_spec
from spotline.shared.domain.states import JobStatus
from tests.e2e.test_e2e_recovery import epochs_of

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]


def test_a_published_job_runs_to_completion(
    local_stack: LocalStack,
    repo_root: Path,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    spec = json.loads((repo_root / "examples" / "digits.json").read_text())
    data = json.dumps({**spec, "epochs": 3}).encode()
    message_id = PubsubBus(local_stack.options.project).publish("submit", data)
    job_id = job_id_for(parse_spec(data), message_id)
    store = FirestoreStore(local_stack.options.project)

    job = wait_for_job(store, job_id, timeout_s=180, echo=False)

    assert job.status == JobStatus.COMPLETED, job.error
    assert [h.substatus for h in job.history] == [
        "REQUESTING_SERVER",
        "CONNECTING_SERVER",
        "GEARING_UP_ENV",
        "SENDING_MODEL_AND_DATA",
        "TRAINING",
        "RETURNING",
        "COMPLETED",
    ]
    assert epochs_of(store, job_id, 3) == [1, 2, 3]
    epochs = store.list_epochs(job_id)
    assert (epochs[-1].metrics["val_accuracy"] or 0.0) > 0.8  # None: not a finite number
    assert job.progress == "3/3" and job.checkpoint_uri
    assert local_stack.cloud is not None
    deadline = time.monotonic() + 15  # the VM is released just after the job is recorded
    while time.monotonic() < deadline:
        instance = store.get_instance(job.instance or "")
        if (
            instance
            and instance.status == "CLOSED"
            and not local_stack.cloud.list({"spotline-job": job_id})
        ):
            break
        time.sleep(0.1)
    assert instance is not None and (instance.status, instance.substatus) == (
        "CLOSED",
        "TERMINATED",
    )
    assert instance.booted_at is not None and instance.last_heartbeat_at is not None
    assert local_stack.cloud.list({"spotline-job": job_id}) == []  # deleted, its process gone

    assert cli(["--workdir", str(local_stack.workdir), "status", job_id]) == 0
    shown = capsys.readouterr().out
    assert "COMPLETED" in shown and "val_accuracy" in shown
    assert cli(["--workdir", str(local_stack.workdir), "status"]) == 0
    assert job_id in capsys.readouterr().out

    # TensorBoard logs, uploaded by the agent, downloaded into DIR/logs/JOB/.
    assert cli(["--workdir", str(local_stack.workdir), "tensorboard", job_id, str(tmp_path)]) == 0
    assert list((tmp_path / "logs" / job_id).glob("events.out.tfevents.*"))

    # Its saved state and outputs, downloaded into DIR/JOB/.
    assert cli(["--workdir", str(local_stack.workdir), "checkpoints", job_id, str(tmp_path)]) == 0
    saved = capsys.readouterr().out
    assert f"checkpoints of {job_id}: " in saved and f"outputs of {job_id}: " in saved
    assert list((tmp_path / job_id / "checkpoints").rglob("*.pt"))
    assert list((tmp_path / job_id / "outputs").rglob("events.out.tfevents.*"))
