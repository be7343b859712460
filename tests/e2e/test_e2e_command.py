"""Any command as a trainer, on the whole local stack: code fetched from
code_uri, epochs reported as JSON lines, state saved on the preemption notice
and resumed; then its logs per attempt, and a replay of the job."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import fsspec
import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.cli.logs import follow
from spotline.infra.client.log_sources import LocalSource
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from spotline.vm_image.agent.transfers import upload_folder
from tests.e2e.test_e2e_recovery import epochs_of, preempt_once, submit, wait_no_vms

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "command_job"


def straight_through(tmp_path: Path, epochs: int, seed: int) -> dict[str, float]:
    events = tmp_path / "events.jsonl"
    env = {
        **os.environ,
        "SPOTLINE_CHECKPOINT_URL": str(tmp_path / "state"),
        "SPOTLINE_EVENTS": str(events),
        "SPOTLINE_EPOCHS": str(epochs),
        "SPOTLINE_SEED": str(seed),
        "SPOTLINE_HYPERPARAMETERS": "{}",
    }
    subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py")], env=env, check=True, capture_output=True
    )
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    return [line for line in lines if line["type"] == "epoch"][-1]["metrics"]


def test_a_command_job_survives_a_preemption(
    local_stack: LocalStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert local_stack.cloud is not None
    host = local_stack.cloud
    assert local_stack.storage is not None
    code_uri = f"{local_stack.storage.root}/code/{tmp_path.name}"
    assert upload_folder(EXAMPLE, code_uri) >= 1  # the agent fetches it from the bucket
    job_id = submit(
        local_stack, trainer=None, command=["python", "train.py"], code_uri=code_uri,
        epochs=4, seed=5, hyperparameters={"step_time_s": 0.02},
    )  # fmt: skip
    # `spotline preempt JOB`: the local cloud's chaos route, as a user runs it.
    preempt = preempt_once(local_stack)
    store = FirestoreStore(local_stack.options.project)
    followed = io.StringIO()
    vms = local_stack.workdir / "vms"
    following = threading.Thread(
        target=follow, args=(LocalSource(vms, poll_s=0.2), store, job_id, None, None, followed)
    )
    following.start()

    job = wait_for_job(store, job_id, 180, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    first, second = job.attempts
    assert first.outcome == "preempted" and first.checkpoint_step is not None
    assert second.resumed_from_step == first.checkpoint_step  # nothing lost
    assert job.metrics == pytest.approx(straight_through(tmp_path, 4, 5), abs=1e-9)
    assert epochs_of(store, job_id, 4) == [1, 2, 3, 4]
    # Its state lives in the bucket, written by train.py through gcsfs.
    state_uri = f"{local_stack.storage.root}/jobs/{job_id}/checkpoints/state.json"
    assert job.checkpoint_uri == state_uri
    with fsspec.open(state_uri, "rb") as state:
        assert json.loads(state.read())["step"] == 4 * 50
    assert first.logs_query and f'jsonPayload.job_id="{job_id}"' in first.logs_query

    capsys.readouterr()
    assert cli(["--workdir", str(local_stack.workdir), "logs", job_id]) == 0
    shown = capsys.readouterr().out
    assert f"== attempt 1 on {first.instance} (preempted)" in shown
    assert f"stopped at step {first.checkpoint_step}" in shown
    assert f"resumed at step {first.checkpoint_step}" in shown and "epoch 4/4" in shown
    # `logs --follow`, from the submit on: the same lines, each once, as they came.
    following.join(timeout=30)
    assert not following.is_alive()
    assert _lines(followed.getvalue()) == _lines(shown)
    assert f"== attempt 2 on {second.instance} (running)" in followed.getvalue()

    assert cli(["--workdir", str(local_stack.workdir), "replay", job_id]) == 0
    replay_id = capsys.readouterr().out.split(" as job ")[1].split()[0]
    replay = wait_for_job(store, replay_id, 180, echo=False)
    assert replay.status == JobStatus.COMPLETED and replay.spec.command == job.spec.command
    assert replay.description.startswith(f"replay of {job_id}")
    # The replay shares nothing with the original: it trained from scratch.
    assert replay.attempts[0].resumed_from_step is None
    wait_no_vms(local_stack, job_id)
    deadline = time.monotonic() + 20
    while host.list({"spotline-job": replay_id}) and time.monotonic() < deadline:
        time.sleep(0.2)


def _lines(output: str) -> list[str]:
    """A job's output lines without the attempts' headers (which say how each
    ended, and a follow prints them while the attempt runs)."""
    return [line for line in output.splitlines() if not line.startswith("== attempt ")]
