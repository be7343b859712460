"""A job's dependency install that runs code of the job's (a ``sitecustomize``
on its ``PYTHONPATH``), as on a VM: the agent's side (``prepare_env``) runs as
root under the system's Python, which the trainer's account may run too (the
tests' own interpreter lives under /root), and pip runs as an account of the
test's own (``tests.spare_account``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from spotline.vm_image.agent.privileges import TrainerAccount
from tests.emulators.test_job_env import tiny_wheel
from tests.spare_account import needs_root, processes_of

SYSTEM_PYTHON = "/usr/bin/python3.11"
# What every such test needs: the marks of its module.
NEEDS = [
    pytest.mark.skipif(needs_root() is not None, reason=str(needs_root())),
    pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"needs {SYSTEM_PYTHON}"),
    pytest.mark.slow,  # real pip installs into fresh venvs
]

# The agent's side: the venv prepared for the requirements, by the account,
# with the job's environment; its root printed last. An install timeout in
# seconds, if given, replaces the agent's.
_PREPARE = """
import json, sys
from pathlib import Path
from spotline.vm_image.agent import job_env
from spotline.vm_image.agent.privileges import TrainerAccount
if len(sys.argv) > 5:
    job_env.PIP_TIMEOUT_S = int(sys.argv[5])
uid = int(sys.argv[3])
account = TrainerAccount("spare", uid, uid, [], dedicated=True)
made = job_env.prepare_env(Path(sys.argv[1]), Path(sys.argv[2]), account, json.loads(sys.argv[4]))
print(json.dumps({"root": str(made.root)}))
"""


@contextmanager
def shared_folder(prefix: str) -> Iterator[Path]:
    """A folder the trainer account can reach (pytest's own is root's only)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def killing_what_is_left(account: TrainerAccount) -> Iterator[None]:
    """Whatever the test asserts, no process of ``account`` outlives it."""
    try:
        yield
    finally:
        for pid in processes_of(account.uid):
            os.kill(pid, 9)


def tiny_requirements(folder: Path) -> Path:
    """A requirements file asking for ``tinydep==0.1`` from a local wheel only."""
    tiny_wheel(folder / "wheels", "from the wheel")
    requirements = folder / "requirements.txt"
    requirements.write_text(f"--no-index\n--find-links {folder / 'wheels'}\ntinydep==0.1\n")
    return requirements


def prepare(
    requirements: Path,
    cache: Path,
    account: TrainerAccount,
    env: dict[str, str],
    install_timeout_s: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """``prepare_env`` as root, under the system's Python."""
    root = Path(__file__).resolve().parents[1]
    timeout = [str(install_timeout_s)] if install_timeout_s is not None else []
    return subprocess.run(
        [SYSTEM_PYTHON, "-c", _PREPARE, str(requirements), str(cache), str(account.uid),
         json.dumps(env), *timeout],
        env={"PATH": os.defpath, "PYTHONPATH": str(root), "PIP_NO_CACHE_DIR": "1"},
        capture_output=True,
        text=True,
        timeout=(install_timeout_s or 180) + 120,
        check=False,
    )  # fmt: skip


def prepared_venv(done: subprocess.CompletedProcess[str]) -> Path:
    """The venv ``prepare`` made, once it succeeded."""
    assert done.returncode == 0, done.stdout + done.stderr
    return Path(json.loads(done.stdout.strip().splitlines()[-1])["root"])


def assert_the_venv_imports(venv: Path, modules: str = "tinydep") -> None:
    """The venv's python imports ``modules`` and finds the wheel's ``tinydep``."""
    ran = subprocess.run(
        [str(venv / "bin" / "python"), "-c", f"import {modules}; print(tinydep.VALUE)"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.stdout.strip() == "from the wheel", ran.stderr
