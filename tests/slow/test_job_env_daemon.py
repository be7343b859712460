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

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
# The install's timeout in this test: what a hold of the pipe made it wait out.
TIMEOUT_S = 60

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
    with shared_folder("spotline-daemon-env-") as folder:
        yield folder


def test_a_daemon_holding_pips_output_does_not_hold_the_install(shared_tmp: Path) -> None:
    account = spare_account()
    requirements = tiny_requirements(shared_tmp)
    hostile = shared_tmp / "hostile"
    hostile.mkdir()
    (hostile / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (shared_tmp / "home").mkdir()
    os.chown(shared_tmp / "home", account.uid, account.gid)
    pidfile = shared_tmp / "home" / "daemon.pid"
    env = {
        "PATH": os.defpath,
        "HOME": str(shared_tmp / "home"),
        "PIP_NO_CACHE_DIR": "1",
        "DAEMON_PIDFILE": str(pidfile),
        "PYTHONPATH": str(hostile),
    }
    started = time.monotonic()
    with killing_what_is_left(account):
        done = prepare(requirements, shared_tmp / "cache", account, env, TIMEOUT_S)
        took_s = time.monotonic() - started
        assert pidfile.exists(), "the build left no daemon: " + done.stdout + done.stderr
        venv = prepared_venv(done)
        # Ended with pip, not with the timeout (a loaded machine: generous bound).
        assert took_s < TIMEOUT_S / 2, f"the install took {took_s:.0f} s"
        assert processes_of(account.uid) == [], "the daemon outlived the install"
        assert_the_venv_imports(venv)
