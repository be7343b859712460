"""A job's dependency install runs its own code (a sitecustomize on its
PYTHONPATH, a package's build) as the trainer's account, while the agent,
root, writes into the venv before and after. Nothing that code does may
choose where root writes, or change the venv once root has taken it over.

As on a VM: the agent is root and pip runs as an account of the test's own
(an unused uid). The agent's side runs under the system's Python, which
that account may run (the test's own interpreter lives under /root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotline.vm_image.agent.privileges import TrainerAccount
from tests.emulators.test_job_env import tiny_wheel
from tests.spare_account import needs_root, processes_of, spare_account

SYSTEM_PYTHON = "/usr/bin/python3.11"
pytestmark = [
    pytest.mark.skipif(needs_root() is not None, reason=str(needs_root())),
    pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"needs {SYSTEM_PYTHON}"),
    pytest.mark.slow,  # real pip installs into fresh venvs
]

PREPARE = """
import json, os, sys
from pathlib import Path
from spotline.vm_image.agent.job_env import prepare_env
from spotline.vm_image.agent.privileges import TrainerAccount
uid = int(sys.argv[3])
account = TrainerAccount("spare", uid, uid, [], dedicated=True)
env = json.loads(sys.argv[4])
job_env = prepare_env(Path(sys.argv[1]), Path(sys.argv[2]), account, env)
print(json.dumps({"root": str(job_env.root)}))
"""

# Every Python the job's environment starts imports this. It prints a path
# of its choosing last (where an agent trusting the venv's python would put
# its .pth, then hand it over), and, once, in the venv's python, leaves a
# daemon holding the venv's pyvenv.cfg open, which writes through it once
# root has taken the venv over.
SITECUSTOMIZE = """
import atexit, os, sys, time
atexit.register(lambda: print(os.environ["STEER_TO"]))
here = os.path.dirname(os.path.abspath(__file__))
if sys.prefix != sys.base_prefix:
    try:
        os.close(os.open(os.path.join(here, "daemon-started"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass
    else:
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                held = os.open(os.path.join(sys.prefix, "pyvenv.cfg"), os.O_WRONLY | os.O_APPEND)
                done = os.path.join(sys.prefix, ".spotline-complete")
                for _ in range(600):
                    if os.path.exists(done):
                        time.sleep(0.2)
                        os.write(held, b"\\n# changed after the take-over\\n")
                        break
                    time.sleep(0.05)
            os._exit(0)
"""


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder the trainer account can reach (pytest's own is root's only)."""
    folder = Path(tempfile.mkdtemp(prefix="spotline-hostile-env-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _prepare(
    requirements: Path, cache: Path, account: TrainerAccount, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [SYSTEM_PYTHON, "-c", PREPARE, str(requirements), str(cache), str(account.uid),
         json.dumps(env)],
        env={"PATH": os.defpath, "PYTHONPATH": str(root), "PIP_NO_CACHE_DIR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip


def _hostile_install(shared_tmp: Path, account: TrainerAccount) -> tuple[Path, Path, Path]:
    """Install a requirement with the hostile sitecustomize on the job's
    PYTHONPATH; the venv, the folder the install tried to steer root's
    write into (root's own), and the hostile folder."""
    tiny_wheel(shared_tmp / "wheels", "from the wheel")
    requirements = shared_tmp / "requirements.txt"
    requirements.write_text(f"--no-index\n--find-links {shared_tmp / 'wheels'}\ntinydep==0.1\n")
    hostile = shared_tmp / "hostile"
    hostile.mkdir()
    (hostile / "sitecustomize.py").write_text(SITECUSTOMIZE)
    os.chown(hostile, account.uid, account.gid)
    # A folder only root may write: where root's own interpreter looks for .pth files.
    roots_site = shared_tmp / "roots-site-packages"
    roots_site.mkdir()
    home = shared_tmp / "home"
    home.mkdir()
    os.chown(home, account.uid, account.gid)
    env = {
        "PATH": os.defpath,
        "HOME": str(home),
        "PYTHONPATH": str(hostile),
        "STEER_TO": str(roots_site),
        "PIP_NO_CACHE_DIR": "1",
    }
    done = _prepare(requirements, shared_tmp / "cache", account, env)
    assert done.returncode == 0, done.stdout + done.stderr
    venv = Path(json.loads(done.stdout.strip().splitlines()[-1])["root"])
    assert (hostile / "daemon-started").exists(), "the hostile install did not run"
    return venv, roots_site, hostile


def test_the_jobs_python_does_not_choose_where_root_writes(shared_tmp: Path) -> None:
    account = spare_account()
    try:
        venv, roots_site, _ = _hostile_install(shared_tmp, account)

        assert list(roots_site.iterdir()) == [], "root wrote where the job's python said"
        # The venv still works: the requirement and the agent's packages.
        ran = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import tinydep, pip; print(tinydep.VALUE)"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert ran.stdout.strip() == "from the wheel", ran.stderr
    finally:
        for pid in processes_of(account.uid):
            os.kill(pid, 9)


def test_nothing_the_install_started_outlives_the_take_over(shared_tmp: Path) -> None:
    account = spare_account()
    try:
        venv, _, _ = _hostile_install(shared_tmp, account)

        assert processes_of(account.uid) == [], "the install's daemon outlived the install"
        time.sleep(1.5)
        config = (venv / "pyvenv.cfg").read_text()
        assert "changed after the take-over" not in config
        assert (venv / "pyvenv.cfg").stat().st_uid == 0
    finally:
        for pid in processes_of(account.uid):
            os.kill(pid, 9)
