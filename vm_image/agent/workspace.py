"""The job's working folder on the VM, and what a reused VM clears before
the next job.

A cooling VM runs the user's next job, and a stopped VM boots again with its
disk for another: neither may hand the next job what the previous one left.
Every job works in ``{workdir}/jobs/{job_id}-a{attempt}/``:

    code/          its code (the trainer's working directory)
    home/          the trainer's HOME (pip, torch and Hugging Face caches)
    tmp/           its TMPDIR (checkpoint staging, temporary files)
    checkpoints/   SPOTLINE_CHECKPOINT_DIR: restored from the job's storage
                   before the trainer starts, mirrored to it while it runs
    outputs/       SPOTLINE_OUTPUT_DIR: mirrored to the job's outputs
    tensorboard/   TensorBoard logs, uploaded to the job's outputs
    events.jsonl   the trainer's reports; trainer.log, its output

Before a job starts, every other folder under ``jobs/`` is removed; when the
trainer runs as its own account, so are processes it left running and files
it owns at the top of /tmp, /var/tmp and /dev/shm (where any account may
write). What a job keeps lives in its checkpoint and output folders in
storage (``checkpoint_mirror`` copies the local ones there), never on the
VM. Beside ``jobs/``, ``cache/`` holds what the same user's next job may
reuse and cannot change: the last data set, read-only to the trainer
(``job_data``), and the last requirements venv (``job_env``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from spotline.shared import logs
from spotline.vm_image.agent.privileges import AccountMissing, TrainerAccount

JOBS_FOLDER = "jobs"
HOME_DIR = "home"
TMP_DIR = "tmp"
CHECKPOINTS_DIR = "checkpoints"
OUTPUTS_DIR = "outputs"
# The places outside its folder where an unprivileged account can leave files.
SHARED_TMP = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))
# Rounds of kill -1 before giving up on a process that will not die (one in
# uninterruptible sleep on a dead disk): the next job starts anyway.
_KILL_ROUNDS = 20
_KILL = "/bin/kill"
# The group the killing process runs as: one no file belongs to.
_NOGROUP = 65534


def job_folder(workdir: Path, job_key: str, account: TrainerAccount | AccountMissing) -> Path:
    """A fresh working folder for the job ``job_key``, after clearing what
    earlier jobs left; the agent writes into it until ``hand_over``. With no
    trainer account (it is missing) only the folders are cleared: no job runs."""
    jobs = workdir / JOBS_FOLDER
    jobs.mkdir(parents=True, exist_ok=True)
    uid = account.uid if isinstance(account, TrainerAccount) and account.dedicated else None
    if uid is not None:
        stop_leftovers(uid)
    for entry in sorted(jobs.iterdir()):
        if entry.name != job_key:
            _remove(entry)
    if uid is not None:
        for place in SHARED_TMP:
            remove_owned(place, uid)
    folder = jobs / job_key
    for sub in (HOME_DIR, TMP_DIR, CHECKPOINTS_DIR, OUTPUTS_DIR):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    return folder


def hand_over(folder: Path, account: TrainerAccount, events_path: Path) -> dict[str, str]:
    """Give the folder (code fetched, events file made) to the trainer's
    account; the environment that points the trainer into it.

    The trainer's HOME and TMPDIR are set only where it runs as its own
    account: run as the agent's user (locally) it keeps the user's caches.
    """
    events_path.touch()
    account.give(folder)
    if not account.dedicated:
        return {}
    return {
        "HOME": str(folder / HOME_DIR),
        "TMPDIR": str(folder / TMP_DIR),
        "USER": account.name,
        "LOGNAME": account.name,
    }


def stop_leftovers(uid: int) -> list[int]:
    """SIGKILL every process of the trainer account ``uid``: a daemon of the
    previous job (or of a dependency install) must not watch or change the
    next one's files. Found by account, which such a process cannot drop
    (only root changes its uid), not by anything it can clear (its
    environment, its name). The pids killed.

    The kill is ``kill(-1, SIGKILL)`` sent by a process running as ``uid``:
    the kernel delivers it to every process of that account at once, so one
    that forks meanwhile leaves no child behind.
    """
    if uid == 0:
        raise ValueError("stop_leftovers(0) would kill every process on the machine")
    found = processes_of(uid)
    for _ in range(_KILL_ROUNDS):
        if not found:
            break
        _kill_all_as(uid)
        time.sleep(0.05)
        found_now = processes_of(uid)
        if not found_now:
            break
        found = sorted({*found, *found_now})
    survivors = processes_of(uid)
    if survivors:
        logs.warning(f"processes of uid {uid} survived SIGKILL: {survivors}")
    killed = sorted(set(found) - set(survivors))
    if killed:
        logs.warning(f"stopped {len(killed)} processes the trainer account left running: {killed}")
    return killed


def processes_of(uid: int) -> list[int]:
    """The pids whose real user is ``uid`` (zombies excluded: they are dead)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
        except OSError:
            continue  # it ended meanwhile
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        real_uid = fields.get("Uid", "").split()
        zombie = fields.get("State", "").strip().startswith("Z")
        if real_uid and int(real_uid[0]) == uid and not zombie:
            pids.append(int(proc.name))
    return pids


def _kill_all_as(uid: int) -> None:
    # kill -1 from a process of the account itself reaches exactly that
    # account's processes (Linux spares the sender). /bin/kill: no Python
    # the account may not be able to read.
    try:
        subprocess.run(
            [_KILL, "-9", "-1"],
            user=uid,
            group=_NOGROUP,
            extra_groups=[],
            env={},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        logs.warning(f"could not run {_KILL} as uid {uid}: {err}; killing one by one")
        for pid in processes_of(uid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def remove_owned(place: Path, uid: int) -> list[str]:
    """Remove the entries directly in ``place`` that belong to ``uid``; their names."""
    removed: list[str] = []
    try:
        entries = list(place.iterdir())
    except OSError:
        return removed
    for entry in entries:
        try:
            if entry.lstat().st_uid != uid:
                continue
        except OSError:
            continue
        _remove(entry)
        removed.append(entry.name)
    return removed


def _remove(path: Path) -> None:
    """Remove a file, link or folder (a link is removed, never followed)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass
    except OSError as err:  # the next job still starts; say what stayed
        logs.warning(f"could not remove {path} left by a previous job: {err}")
