"""Who the trainer runs as.

On a VM the agent runs as root (the systemd unit), and the trainer (the
user's code, and whatever it installs) must not: it runs as a dedicated
system account with no login shell and no sudo, ``spotline-trainer`` by
default, which the image creates and puts in the groups that own the GPU
devices. What the agent keeps root for, and nothing else:

* starting the trainer as that account (setuid/setgid);
* handing it the job's working folder (chown), and removing what the previous
  job on a reused VM left behind, the account's files in /tmp included;
* signalling the trainer, and stopping processes a previous job left running
  (they belong to another user).

The rest (metadata, Pub/Sub, storage, Secret Manager) needs no privilege; the
VM's poweroff on failure is the unit's FailureAction, done by systemd.

Where the agent is not root (a laptop) it cannot switch users: the trainer
runs as the agent's own user, and the agent says so. An empty
``SPOTLINE_TRAINER_USER`` asks for that even as root, silently: the local
stack's VMs are its own processes, run as the stack's user.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotline.shared import logs

TRAINER_USER_ENV = "SPOTLINE_TRAINER_USER"
# Empty: run the trainer as the agent's own user (the local stack's choice).
DEFAULT_TRAINER_USER = "spotline-trainer"
# Files the trainer creates are its own: the next job's trainer (the same
# account) never sees them anyway, as the folder is removed, but a umask of
# 077 keeps them from every other account meanwhile.
TRAINER_UMASK = 0o077


class AccountMissing(RuntimeError):
    """The configured trainer account does not exist on this machine."""


@dataclass(frozen=True)
class TrainerAccount:
    """The account the trainer runs as; ``dedicated``: another one than the
    agent's (so the agent switches to it, and owns nothing of it)."""

    name: str
    uid: int
    gid: int
    groups: list[int] = field(default_factory=list)
    dedicated: bool = False

    def popen_kwargs(self) -> dict[str, Any]:
        """What ``subprocess.Popen`` needs to start the trainer as this account.

        ``extra_groups`` is the account's own groups (video and render on the
        image, for /dev/nvidia*), never the agent's: a trainer started by root
        would otherwise keep root's supplementary groups.
        """
        if not self.dedicated:
            return {}
        return {
            "user": self.uid,
            "group": self.gid,
            "extra_groups": list(self.groups),
            "umask": TRAINER_UMASK,
        }

    def give(self, path: Path) -> None:
        """Make ``path`` and everything under it the account's (no-op when the
        trainer runs as the agent's user). Links are changed, not followed."""
        if not self.dedicated:
            return
        os.chown(path, self.uid, self.gid, follow_symlinks=False)
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                os.chown(os.path.join(root, name), self.uid, self.gid, follow_symlinks=False)


def trainer_account(env: Mapping[str, str] | None = None) -> TrainerAccount:
    """The account named by ``SPOTLINE_TRAINER_USER`` (default
    ``spotline-trainer``) when the agent is root, else the agent's own.

    Raises:
        AccountMissing: the agent is root and the named account does not
            exist. The trainer must then not run at all (not as root).
    """
    env = os.environ if env is None else env
    wanted = env.get(TRAINER_USER_ENV, DEFAULT_TRAINER_USER)
    uid = os.geteuid()
    own = pwd.getpwuid(uid).pw_name if _known(uid) else str(uid)
    if uid != 0 or not wanted:
        # An empty setting is a choice made for this machine (the local stack
        # makes it for every VM it starts, at every attempt): nothing to say.
        if wanted:
            logs.info(f"the trainer runs as the agent's own user {own!r} (the agent is not root)")
        return TrainerAccount(own, uid, os.getegid(), os.getgroups())
    try:
        entry = pwd.getpwnam(wanted)
    except KeyError:
        raise AccountMissing(
            f"the trainer account {wanted!r} ({TRAINER_USER_ENV}) does not exist on this VM; "
            "the spotline image creates spotline-trainer (vm_image/scripts/install.sh). "
            "The trainer is not run as root instead"
        ) from None
    groups = os.getgrouplist(wanted, entry.pw_gid)
    if entry.pw_uid == 0:
        logs.warning(f"{TRAINER_USER_ENV}={wanted!r} is root: the trainer runs as root")
        return TrainerAccount(wanted, 0, entry.pw_gid, groups)
    names = sorted(grp.getgrgid(g).gr_name for g in groups if _group_known(g))
    logs.info(f"the trainer runs as {wanted!r} (uid {entry.pw_uid}, groups {', '.join(names)})")
    return TrainerAccount(wanted, entry.pw_uid, entry.pw_gid, groups, dedicated=True)


def _known(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _group_known(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True
