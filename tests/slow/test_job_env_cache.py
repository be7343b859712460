"""The venv a reused VM keeps for the next job with the same
``requirements.txt`` must stay what pip installed: the trainer runs as the
account pip ran as, and a trainer that could write into the cached venv (a
``pip install`` at run time, a ``.pth`` file, an edited module) would change
what the next job with the same file runs, unseen.

As on a VM: the agent is root and pip runs as another account (``nobody``).
The agent's side runs under the system's Python, which that account may run
(the test's own interpreter lives under /root); no emulators.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.emulators.test_job_env import tiny_wheel
from tests.spare_account import nobody_must_be_idle

SYSTEM_PYTHON = "/usr/bin/python3.11"
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root, as the agent on a VM"),
    pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"needs {SYSTEM_PYTHON}"),
]

# The agent's step: prepare_env with the trainer account, as trainer_launch does.
PREPARE = """
import json, os, sys
from pathlib import Path
from spotline.vm_image.agent.job_env import prepare_env
from spotline.vm_image.agent.privileges import trainer_account
account = trainer_account({"SPOTLINE_TRAINER_USER": "nobody"})
job_env = prepare_env(Path(sys.argv[1]), Path(sys.argv[2]), account, dict(os.environ))
print(json.dumps({"root": str(job_env.root), "python": str(job_env.python)}))
"""


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder the trainer account can reach (pytest's own is root's only)."""
    folder = Path(tempfile.mkdtemp(prefix="spotline-env-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _prepare(requirements: Path, cache: Path) -> dict[str, str]:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", PREPARE, str(requirements), str(cache)],
        env={"PATH": os.defpath, "PYTHONPATH": str(root), "PIP_NO_CACHE_DIR": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _as_trainer(script: str) -> subprocess.CompletedProcess[str]:
    nobody = pwd.getpwnam("nobody")
    return subprocess.run(
        ["/bin/sh", "-c", script],
        user=nobody.pw_uid,
        group=nobody.pw_gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.slow
def test_a_trainer_cannot_change_the_cached_venv_the_next_job_reuses(shared_tmp: Path) -> None:
    nobody_must_be_idle()
    tiny_wheel(shared_tmp / "wheels", "from the wheel")
    requirements = shared_tmp / "requirements.txt"
    requirements.write_text(f"--no-index\n--find-links {shared_tmp / 'wheels'}\ntinydep==0.1\n")
    cache = shared_tmp / "cache"

    first = _prepare(requirements, cache)
    root = Path(first["root"])
    module = next(root.glob("lib/python*/site-packages/tinydep/__init__.py"))
    site_packages = module.parent.parent

    # Job A's trainer, as the trainer account, tries to change the venv.
    for change in (
        f"echo 'VALUE = \"changed\"' > {module}",
        f"echo 'import os' > {site_packages}/changed.pth",
        f"touch {root}/bin/installed-at-run-time",
        f"rm -f {root}/.spotline-complete",
    ):
        assert _as_trainer(change).returncode != 0, f"the trainer could: {change}"
    # It can still read and run everything in it.
    reads = _as_trainer(f"{first['python']} -c 'import tinydep; print(tinydep.VALUE)'")
    assert reads.returncode == 0 and reads.stdout.strip() == "from the wheel", reads.stderr

    # Job B, the same requirements.txt: the same venv, as pip left it.
    second = _prepare(requirements, cache)
    assert second["root"] == first["root"]
    assert not (site_packages / "changed.pth").exists()
    ran = subprocess.run(
        [second["python"], "-c", "import tinydep; print(tinydep.VALUE)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout.strip() == "from the wheel"
