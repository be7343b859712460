"""A dependency install whose code leaves a daemon holding pip's output.

The agent read pip's output until its end, and a pipe ends only when every
process holding its write end has closed it: a daemon started inside pip's
own process (here by a ``sitecustomize`` on the job's ``PYTHONPATH``, which
every Python of the job's environment imports) kept the pipe open, and the
install waited out its whole timeout (1800 s), then failed. Now the install
ends when pip's process does; then every process of the trainer's account is
killed (the daemon with it), and what is left in the pipe is read for a short
while at most.

(A package's own build cannot reach that pipe: pip runs a build backend with
pipes of its own and reads them to their end, and the agent's pipe, root's,
cannot be opened again through /proc by the trainer's account. A daemon a
build leaves holding pip's own pipe makes pip wait, which only the install's
timeout ends.)

As on a VM: the agent is root and pip runs as an account of the test's own.
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

from tests.emulators.test_job_env import tiny_wheel
from tests.spare_account import needs_root, processes_of, spare_account

SYSTEM_PYTHON = "/usr/bin/python3.11"
pytestmark = [
    pytest.mark.skipif(needs_root() is not None, reason=str(needs_root())),
    pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"needs {SYSTEM_PYTHON}"),
    pytest.mark.slow,  # real pip installs into fresh venvs
]
# The install's timeout in this test: what a hold of the pipe made it wait out.
TIMEOUT_S = 60

PREPARE = """
import json, sys
from pathlib import Path
from spotline.vm_image.agent import job_env
from spotline.vm_image.agent.privileges import TrainerAccount
job_env.PIP_TIMEOUT_S = int(sys.argv[5])
uid = int(sys.argv[3])
account = TrainerAccount("spare", uid, uid, [], dedicated=True)
made = job_env.prepare_env(Path(sys.argv[1]), Path(sys.argv[2]), account, json.loads(sys.argv[4]))
print(json.dumps({"root": str(made.root)}))
"""

# Imported by every Python the job's environment starts: in pip's own process
# (the first venv python: pip's), a daemon that keeps the inherited stdout, the agent's pipe.
SITECUSTOMIZE = """
import os, sys, time
if sys.prefix != sys.base_prefix and not os.path.exists(os.environ["DAEMON_PIDFILE"]):
    with open(os.environ["DAEMON_PIDFILE"], "w") as f:
        f.write("starting")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(os.environ["DAEMON_PIDFILE"], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(300)
        os._exit(0)
"""


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder the trainer account can reach (pytest's own is root's only)."""
    folder = Path(tempfile.mkdtemp(prefix="spotline-daemon-env-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_daemon_holding_pips_output_does_not_hold_the_install(shared_tmp: Path) -> None:
    account = spare_account()
    tiny_wheel(shared_tmp / "wheels", "from the wheel")
    hostile = shared_tmp / "hostile"
    hostile.mkdir()
    (hostile / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (shared_tmp / "home").mkdir()
    os.chown(shared_tmp / "home", account.uid, account.gid)
    requirements = shared_tmp / "requirements.txt"
    requirements.write_text(f"--no-index\n--find-links {shared_tmp / 'wheels'}\ntinydep==0.1\n")
    pidfile = shared_tmp / "home" / "daemon.pid"
    env = {
        "PATH": os.defpath,
        "HOME": str(shared_tmp / "home"),
        "PIP_NO_CACHE_DIR": "1",
        "DAEMON_PIDFILE": str(pidfile),
        "PYTHONPATH": str(hostile),
    }
    root = Path(__file__).resolve().parents[2]
    started = time.monotonic()
    try:
        done = subprocess.run(
            [SYSTEM_PYTHON, "-c", PREPARE, str(requirements), str(shared_tmp / "cache"),
             str(account.uid), json.dumps(env), str(TIMEOUT_S)],
            env={"PATH": os.defpath, "PYTHONPATH": str(root), "PIP_NO_CACHE_DIR": "1"},
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S + 120,
            check=False,
        )  # fmt: skip
        took_s = time.monotonic() - started
        assert pidfile.exists(), "the build left no daemon: " + done.stdout + done.stderr
        assert done.returncode == 0, done.stdout + done.stderr
        # Ended with pip, not with the timeout (a loaded machine: generous bound).
        assert took_s < TIMEOUT_S / 2, f"the install took {took_s:.0f} s"
        assert processes_of(account.uid) == [], "the daemon outlived the install"
        venv = Path(json.loads(done.stdout.strip().splitlines()[-1])["root"])
        ran = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import tinydep; print(tinydep.VALUE)"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert ran.stdout.strip() == "from the wheel", ran.stderr
    finally:
        for pid in processes_of(account.uid):
            os.kill(pid, 9)
