"""An account of the tests' own, as the trainer's on a VM: a uid no user of
this machine has and no process runs as, so that killing "every process of
the trainer account" can only reach what the test started. Needs root."""

from __future__ import annotations

import os
import pwd
import random
from pathlib import Path

from spotline.vm_image.agent.privileges import TrainerAccount

# The local stack's machines and CI run nothing as these uids.
_FIRST, _LAST = 61000, 64999


def spare_account() -> TrainerAccount:
    """A dedicated trainer account with an unused uid (and the same gid)."""
    for _ in range(200):
        uid = random.randint(_FIRST, _LAST)
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if not processes_of(uid):
                return TrainerAccount(f"spare-{uid}", uid, uid, [], dedicated=True)
    raise RuntimeError(f"no unused uid in {_FIRST}..{_LAST}")


def needs_root() -> str | None:
    """Why the test cannot run here, or None."""
    return None if os.geteuid() == 0 else "needs root, as the agent on a VM"


def processes_of(uid: int) -> list[int]:
    """The live (not zombie) processes whose real user is ``uid``, read from
    /proc by the test itself."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = dict(line.split(":", 1) for line in (proc / "status").read_text().splitlines())
        except (OSError, ValueError):
            continue
        if int(status["Uid"].split()[0]) == uid and not status["State"].strip().startswith("Z"):
            pids.append(int(proc.name))
    return pids


def nobody_must_be_idle() -> None:
    """Skip, loudly, where ``nobody`` runs processes: a test that makes it
    the trainer's account would have the agent kill every one of them (it
    ends every process of the trainer's account between jobs)."""
    import pytest

    running = processes_of(pwd.getpwnam("nobody").pw_uid) if os.geteuid() == 0 else []
    if running:
        pytest.skip(
            f"'nobody' runs {len(running)} process(es) here (pids {running[:5]}): the agent "
            "would kill them all as the trainer's account's leftovers"
        )
