"""The failure policy on the whole local stack: a command job that
exits 3 on its first attempt (no marker in its checkpoint folder yet) is
restarted on a new VM and resumes from its checkpoint; preempted then, its
next attempt goes to the other zone (``avoid_preempted_zone_s``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.vm_image.agent.transfers import upload_folder
from tests.e2e.test_e2e_recovery import epochs_of, preempt_once, submit, wait_no_vms

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

# Any command: one epoch (a checkpoint), then exit 3 unless its marker says it
# failed before; later runs resume from the checkpoint. A SIGTERM (the Spot
# notice) stops it at the next step, saved, with 143.
FLAKY = """
import json, os, signal, sys, time
import fsspec

stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
folder = os.environ["SPOTLINE_CHECKPOINT_URL"].rstrip("/")
fs, root = fsspec.core.url_to_fs(folder)
fs.makedirs(root, exist_ok=True)
state, marker = root + "/state.json", root + "/failed-once"
epochs = int(os.environ["SPOTLINE_EPOCHS"])
pause = float(json.loads(os.environ.get("SPOTLINE_HYPERPARAMETERS") or "{}").get("pause_s", 0))


def report(record):
    with open(os.environ["SPOTLINE_EVENTS"], "a") as events:
        events.write(json.dumps(record) + "\\n")


done = 0
if fs.exists(state):
    done = json.loads(fs.cat_file(state))["epoch"]
    report({"type": "resumed", "step": done * 10, "checkpoint_uri": folder + "/state.json"})
    print(f"resumed at epoch {done}", flush=True)
for epoch in range(done + 1, epochs + 1):
    for _ in range(10):
        if stop:
            print(f"stopped after epoch {epoch - 1}", flush=True)
            sys.exit(143)
        time.sleep(pause / 10)
    fs.pipe_file(state, json.dumps({"epoch": epoch}).encode())
    report({"type": "epoch", "epoch": epoch, "epochs": epochs, "step": epoch * 10,
            "metrics": {"loss": 1 / epoch}, "checkpoint_uri": folder + "/state.json"})
    if not fs.exists(marker):
        fs.pipe_file(marker, b"failed once")
        print("a flaky failure", flush=True)
        sys.exit(3)
"""


def test_an_error_restarts_from_the_checkpoint_and_a_preempted_zone_is_avoided(
    local_stack: LocalStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert local_stack.storage is not None
    code = tmp_path / "code"
    code.mkdir()
    (code / "flaky.py").write_text(FLAKY)
    code_uri = f"{local_stack.storage.root}/code/{tmp_path.name}"
    assert upload_folder(code, code_uri) == 1
    job_id = submit(
        local_stack, trainer=None, command=["python", "flaky.py"], code_uri=code_uri,
        epochs=4, hyperparameters={"pause_s": 1.0}, max_restarts_on_errors=1,
        avoid_preempted_zone_s=600,
    )  # fmt: skip
    # Attempt 2 (the restart) is preempted once it has resumed and trained on.
    preempt = preempt_once(local_stack, attempt=2, epoch=2)
    store = FirestoreStore(local_stack.options.project)

    job = wait_for_job(store, job_id, 240, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    assert (job.restarts_on_errors, job.preemptions) == (1, 1)
    first, second, third = job.attempts
    assert (first.outcome, second.outcome, third.outcome) == ("failed", "preempted", "completed")
    assert second.resumed_from_step == 10  # the epoch attempt 1 saved before it failed
    assert third.resumed_from_step is not None and third.resumed_from_step >= 20
    # The error was not the zone's fault; the preemption was: attempt 3 went elsewhere.
    assert first.zone == second.zone == "us-central1-a" and third.zone == "us-central1-b"
    assert JobSubstatus.ERRORED in [h.substatus for h in job.history]
    # Each attempt records the epochs it ran (a resumed one may run one again).
    assert sorted(set(epochs_of(store, job_id, 4))) == [1, 2, 3, 4]
    wait_no_vms(local_stack, job_id)

    capsys.readouterr()
    assert cli(["--workdir", str(local_stack.workdir), "status", job_id]) == 0
    shown = capsys.readouterr().out
    counts = "restarts     1 on errors (max_restarts_on_errors=1); preemptions 1 (max_preemptions:"
    assert counts in shown
    print(shown)  # what docs/guides/preemption.md shows (pytest -rP)
