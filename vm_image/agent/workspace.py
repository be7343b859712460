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

import os
import shutil
import signal
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
# Set in every trainer's environment (trainer_process.trainer_env), and so in
# its children's: how a process left by a previous job is recognised.
JOB_MARK = "SPOTLINE_JOB_ID"


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
    """SIGKILL every process of ``uid`` that a trainer started (it carries
    ``JOB_MARK`` in its environment): a daemon of the previous job must not
    watch the next one's files. The pids killed."""
    mark = f"{JOB_MARK}=".encode()
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if proc.stat().st_uid != uid:
                continue
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue  # it ended meanwhile
        if any(item.startswith(mark) for item in environ.split(b"\0")):
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
            except ProcessLookupError:
                pass
    if killed:
        logs.warning(f"stopped {len(killed)} processes a previous job left running: {killed}")
    return killed


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
