"""A reused VM's next job must not share it with what the previous job left
running. A process cannot drop its account (only root changes a uid), but it
can drop anything else: its environment, its name, its process group. The
cleanup must find it by its account.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from spotline.vm_image.agent.workspace import job_folder, stop_leftovers
from tests.spare_account import needs_root, processes_of, spare_account

pytestmark = pytest.mark.skipif(needs_root() is not None, reason=str(needs_root()))

# Forks a child every 10 ms for as long as it lives: a kill that walks the
# processes one by one keeps missing the newest.
FORKER = "while true; do /bin/sleep 300 & /bin/sleep 0.01; done"


def _start_as(uid: int, argv: list[str]) -> subprocess.Popen[bytes]:
    """Started as ``uid``, with an empty environment, in a session of its own."""
    return subprocess.Popen(
        argv,
        user=uid,
        group=uid,
        extra_groups=[],
        env={},
        cwd="/",
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _gone(process: subprocess.Popen[bytes]) -> bool:
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_a_process_that_cleared_its_environment_is_stopped_before_the_next_job(
    tmp_path: Path,
) -> None:
    account = spare_account()
    daemon = _start_as(account.uid, ["/bin/sleep", "300"])
    try:
        time.sleep(0.2)
        assert processes_of(account.uid) == [daemon.pid]

        job_folder(tmp_path, "next-a1", account)

        assert _gone(daemon), "the previous job's process outlived the cleanup"
        assert processes_of(account.uid) == []
    finally:
        daemon.kill()


def test_a_process_forking_all_the_time_leaves_no_child(tmp_path: Path) -> None:
    account = spare_account()
    forker = _start_as(account.uid, ["/bin/sh", "-c", FORKER])
    try:
        time.sleep(0.5)
        assert len(processes_of(account.uid)) > 3

        killed = stop_leftovers(account.uid)

        assert forker.pid in killed
        assert _gone(forker)
        time.sleep(0.2)
        assert processes_of(account.uid) == []
    finally:
        forker.kill()


def test_root_is_never_swept() -> None:
    with pytest.raises(ValueError, match="every process"):
        stop_leftovers(0)
