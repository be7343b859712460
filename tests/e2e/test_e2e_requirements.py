"""A job's ``requirements.txt`` on the whole local stack: its code (in the
storage emulator) names a requirement, the VM installs it into the job's own
venv before the trainer starts, and the trainer imports it and reports what
it holds. No internet: the requirement is a wheel the test makes, found
through the file's own ``--no-index --find-links``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import fsspec
import pytest

import spotline
from spotline.infra.cli.commands import main
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.client.recording import copy_folder
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from tests.e2e.test_e2e_recovery import submit
from tests.emulators.test_job_env import tiny_wheel

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

# Reports the requirement's VALUE (a number) and where Python ran from.
TRAIN = """\
import json, os, sys
import tinydep
with open(os.environ["SPOTLINE_EVENTS"], "a") as events:
    events.write(json.dumps({"type": "epoch", "epoch": 1, "epochs": 1, "step": 1,
                             "metrics": {"value": float(tinydep.VALUE)}}) + "\\n")
print("tinydep", tinydep.VALUE, "in", sys.prefix, flush=True)
"""


def test_a_job_installs_its_requirement_and_imports_it(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    assert local_stack.storage is not None
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, "42")
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    (code / "requirements.txt").write_text(f"--no-index\n--find-links {wheels}\ntinydep==0.1\n")
    code_uri = f"{local_stack.storage.root}/code/{tmp_path.name}"
    copy_folder(code.as_uri(), code_uri)

    job_id = submit(
        local_stack, trainer=None, command=["python", "train.py"], code_uri=code_uri, epochs=1
    )
    job = wait_for_job(FirestoreStore(local_stack.options.project), job_id, 240, echo=False)

    assert job.status == JobStatus.COMPLETED, job.error
    assert job.metrics == {"value": 42.0}  # the wheel's module, installed on the VM
    log = Path(local_stack.workdir, "vms", f"{job.attempts[0].instance}.log").read_text()
    assert "tinydep 42 in " in log and "/cache/envs/" in log  # the job's own venv
    # The install is a step of its own, between the code's download and training.
    steps = [str(h.substatus) for h in job.history]
    at = steps.index("INSTALLING_REQUIREMENTS")
    assert steps[at - 1 : at + 2] == [
        "SENDING_MODEL_AND_DATA",
        "INSTALLING_REQUIREMENTS",
        "TRAINING",
    ]


def test_spotline_submit_ships_a_folder_once_and_runs_it(
    local_stack: LocalStack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The spec names its folder relative to itself, and is submitted from elsewhere.
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, "7")
    code = tmp_path / "project" / "code"
    code.mkdir(parents=True)
    (code / "train.py").write_text(TRAIN)
    (code / "requirements.txt").write_text(f"--no-index\n--find-links {wheels}\ntinydep==0.1\n")
    (code / ".gitignore").write_text("*.ckpt\n")
    (code / "old.ckpt").write_bytes(b"w" * 1000)
    spec = {
        "user": "shipper", "machine_ids": ["g2-standard-4"], "command": ["python", "train.py"],
        "epochs": 1, "code_dir": "./code",
    }  # fmt: skip
    (tmp_path / "project" / "job.json").write_text(json.dumps(spec))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    assert main(["submit", "../project/job.json"]) == 0

    out = capsys.readouterr().out
    assert "code: ../project/code: 3 file(s), " in out  # train.py, requirements.txt, .gitignore
    assert "uploaded 3 file(s) from ../project/code to " in out
    job_id = out.split("job id: ")[1].split()[0]
    store = FirestoreStore(local_stack.options.project)
    job = wait_for_job(store, job_id, 240, echo=False)
    assert job.status == JobStatus.COMPLETED, job.error
    assert job.metrics == {"value": 7.0}
    assert job.spec.code_uri is not None and "/code/" in job.spec.code_uri
    fs, root = fsspec.core.url_to_fs(job.spec.code_uri)
    fs.invalidate_cache(root)
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.find(root)) == [
        ".gitignore", "requirements.txt", "train.py",
    ]  # fmt: skip

    # The same folder again: nothing uploaded, the same code_uri.
    assert main(["submit", "../project/job.json"]) == 0
    again = capsys.readouterr().out
    assert f"../project/code is unchanged since uploaded to {job.spec.code_uri}" in again
    assert "uploaded" not in again.replace("since uploaded", "")
    second = wait_for_job(store, again.split("job id: ")[1].split()[0], 240, echo=False)
    assert second.status == JobStatus.COMPLETED and second.spec.code_uri == job.spec.code_uri


def test_a_requirement_no_index_has_fails_the_job_on_its_first_vm(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('never')\n")
    # --no-index: pip looks nowhere (no internet here), as an index without it would.
    (code / "requirements.txt").write_text("--no-index\nno-such-package-spotline==1.0\n")
    spec = {
        "user": "pipfail", "machine_ids": ["g2-standard-4"], "command": ["python", "train.py"],
        "max_restarts_on_errors": 3,
    }  # fmt: skip
    started = time.monotonic()

    job_id = spotline.submit(spec, code_dir=code).id
    job = wait_for_job(FirestoreStore(local_stack.options.project), job_id, 60, echo=False)

    assert job.status == JobStatus.FAILED, job
    assert time.monotonic() - started < 60
    assert len(job.attempts) == 1 and job.restarts_on_errors == 0
    assert job.error is not None
    assert "pip install -r requirements.txt failed" in job.error
    assert "No matching distribution found for no-such-package-spotline==1.0" in job.error
