"""A job's ``requirements.txt`` on the whole local stack: its code (in the
storage emulator) names a requirement, the VM installs it into the job's own
venv before the trainer starts, and the trainer imports it and reports what
it holds. No internet: the requirement is a wheel the test makes, found
through the file's own ``--no-index --find-links``."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotline.infra.cli.demo import wait_for_job
from spotline.infra.client.recording import copy_folder
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from tests.test_e2e_recovery import submit
from tests.test_job_env import tiny_wheel

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
