"""A script that knows nothing of spotline but one variable: it saves with
``torch.save`` into the local folder ``$SPOTLINE_CHECKPOINT_DIR`` and resumes
from the newest file there. On the whole local stack, preempted mid-run, its
next attempt resumes from its last save (the agent mirrored the folder to
storage and restored it) and its outputs reach storage."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fsspec.core import url_to_fs

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus
from spotline.vm_image.agent.checkpoint_mirror import MANIFEST
from spotline.vm_image.agent.transfers import upload_folder
from tests.doc_examples import blocks
from tests.e2e.test_e2e_recovery import submit, wait_no_vms

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

EPOCHS = 6  # 30 s a run: the notice lands mid-run on a busy machine too
STEPS = EPOCHS * 100
# The trainer page's example of a script that saves to the local folder.
[TRAIN] = blocks("docs/guides/trainer.md", "## Checkpoints in a local folder", "python")


def manifest_units(url: str) -> dict[str, Any]:
    fs, root = url_to_fs(url)
    try:
        return dict(json.loads(fs.cat_file(f"{root}/{MANIFEST}"))["units"])
    except FileNotFoundError:
        return {}


def test_a_script_saving_to_the_local_folder_resumes_from_its_last_save(
    local_stack: LocalStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert local_stack.storage is not None
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    code_uri = f"{local_stack.storage.root}/code/{tmp_path.name}"
    upload_folder(code, code_uri)
    job_id = submit(
        local_stack, trainer=None, command=["python", "train.py"], code_uri=code_uri, epochs=EPOCHS
    )
    jobs = f"{local_stack.storage.root}/jobs/{job_id}"
    preempted: list[str] = []

    def preempt_once_something_is_stored(job: JobDoc) -> None:
        # The script reports nothing: the preemption comes once the mirror
        # has stored a save of the first attempt.
        if preempted or job.attempt != 1 or job.substatus != "TRAINING":
            return
        if manifest_units(f"{jobs}/checkpoints"):
            preempted.append(job.instance or "")
            chaos = ["--workdir", str(local_stack.workdir), "preempt", "--notice-s", "10", job_id]
            assert cli(chaos) == 0

    store = FirestoreStore(local_stack.options.project)
    job = wait_for_job(store, job_id, 240, echo=False, on_update=preempt_once_something_is_stored)

    assert job.status == JobStatus.COMPLETED, job.error
    assert preempted, "the mirror stored nothing while the first attempt ran"
    assert job.nothing_saved is None
    assert [a.outcome for a in job.attempts] == ["preempted", "completed"], job.history

    capsys.readouterr()
    assert cli(["--workdir", str(local_stack.workdir), "logs", job_id]) == 0
    shown = capsys.readouterr().out
    first_log = shown.split("== attempt 2")[0]
    last_saved = int(re.findall(r"saved step (\d+)", first_log)[-1])
    # The outputs folder reached storage; the run resumed from its last save:
    # the save just before the notice went up before the preemption was reported.
    with url_to_fs(f"{jobs}/outputs")[0].open(f"{jobs}/outputs/result.json") as result:
        outcome = json.load(result)
    assert outcome["starts"] == [0, last_saved] and last_saved > 0
    assert outcome["step"] == STEPS and outcome["w"] == pytest.approx(0.5 * STEPS)
    assert f"starting at step {last_saved}" in shown
    # The rotation reached storage too: the last two saves, nothing older.
    assert sorted(manifest_units(f"{jobs}/checkpoints")) == [
        f"step-{STEPS - 50:06d}.pt",
        f"step-{STEPS:06d}.pt",
    ]
    wait_no_vms(local_stack, job_id)


NEVER_SAVES = """\
import os, time

import torch

os.makedirs("checkpoints", exist_ok=True)  # beside the code: on the VM's disk only
for step in range(1, 161):
    time.sleep(0.05)
    if step % 20 == 0:
        torch.save({"step": step}, os.path.join("checkpoints", f"step-{step}.pt"))
print("done", flush=True)
"""


def test_a_job_that_never_saved_says_so_with_what_to_do(
    local_stack: LocalStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert local_stack.storage is not None
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(NEVER_SAVES)
    code_uri = f"{local_stack.storage.root}/code/{tmp_path.name}"
    upload_folder(code, code_uri)
    job_id = submit(local_stack, trainer=None, command=["python", "train.py"], code_uri=code_uri)
    seen: list[str] = []

    def preempt_then_note(job: JobDoc) -> None:
        if not seen and job.attempt == 1 and job.substatus == "TRAINING":
            seen.append("preempting")
            cli(["--workdir", str(local_stack.workdir), "preempt", "--notice-s", "10", job_id])
        if job.attempt == 2 and job.nothing_saved and job.nothing_saved not in seen:
            seen.append(job.nothing_saved)

    store = FirestoreStore(local_stack.options.project)
    job = wait_for_job(store, job_id, 240, echo=False, on_update=preempt_then_note)

    assert job.status == JobStatus.COMPLETED, job.error
    assert job.preemptions == 1
    assert seen[1].startswith("preempted with nothing saved, so it starts over; point your")
    assert "$SPOTLINE_CHECKPOINT_DIR" in seen[1]
    assert job.nothing_saved is not None
    assert job.nothing_saved.startswith("completed without saving a checkpoint or an output")
    capsys.readouterr()
    assert cli(["--workdir", str(local_stack.workdir), "status", job_id]) == 0
    assert f"nothing saved  {job.nothing_saved}" in capsys.readouterr().out.splitlines()
    assert cli(["--workdir", str(local_stack.workdir), "status", job_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nothing_saved"] == job.nothing_saved
    wait_no_vms(local_stack, job_id)
