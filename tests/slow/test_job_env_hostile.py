"""A job's dependency install runs its own code (a sitecustomize on its
PYTHONPATH, a package's build) as the trainer's account, while the agent,
root, writes into the venv before and after. Nothing that code does may
choose where root writes, or change the venv once root has taken it over.

As on a VM: the agent is root and pip runs as an account of the test's own
(an unused uid). The agent's side runs under the system's Python, which
that account may run (the test's own interpreter lives under /root).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotline.vm_image.agent.privileges import TrainerAccount
from tests.hostile_install import (
    NEEDS,
    assert_the_venv_imports,
    killing_what_is_left,
    prepare,
    prepared_venv,
    shared_folder,
    tiny_requirements,
)
from tests.spare_account import processes_of, spare_account

pytestmark = NEEDS

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
    with shared_folder("spotline-hostile-env-") as folder:
        yield folder


def _hostile_install(shared_tmp: Path, account: TrainerAccount) -> tuple[Path, Path, Path]:
    """Install a requirement with the hostile sitecustomize on the job's
    PYTHONPATH; the venv, the folder the install tried to steer root's
    write into (root's own), and the hostile folder."""
    requirements = tiny_requirements(shared_tmp)
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
    venv = prepared_venv(prepare(requirements, shared_tmp / "cache", account, env))
    assert (hostile / "daemon-started").exists(), "the hostile install did not run"
    return venv, roots_site, hostile


def test_the_jobs_python_does_not_choose_where_root_writes(shared_tmp: Path) -> None:
    account = spare_account()
    with killing_what_is_left(account):
        venv, roots_site, _ = _hostile_install(shared_tmp, account)

        assert list(roots_site.iterdir()) == [], "root wrote where the job's python said"
        # The venv still works: the requirement and the agent's packages.
        assert_the_venv_imports(venv, "tinydep, pip")


def test_nothing_the_install_started_outlives_the_take_over(shared_tmp: Path) -> None:
    account = spare_account()
    with killing_what_is_left(account):
        venv, _, _ = _hostile_install(shared_tmp, account)

        assert processes_of(account.uid) == [], "the install's daemon outlived the install"
        time.sleep(1.5)
        config = (venv / "pyvenv.cfg").read_text()
        assert "changed after the take-over" not in config
        assert (venv / "pyvenv.cfg").stat().st_uid == 0
