"""Everything between a fetched job and its running trainer: its data set
and Python requirements (``prepare``), the account it runs as, its secrets
resolved, its folder handed over, its environment, its container."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotline.shared import logs
from spotline.shared.contract.assignment import Assignment
from spotline.shared.contract.ranks import processes_per_node
from spotline.vm_image.agent.container import (
    BadContainerSetup,
    ContainersLeft,
    PullFailed,
    container_command,
    container_name,
    kill_container,
    pull_image,
    remove_agent_containers,
    write_env_file,
)
from spotline.vm_image.agent.job_data import DATA_DIR_ENV, DataUnavailable, fetch_data
from spotline.vm_image.agent.job_env import InstallFailed, JobEnv, prepare_env, requirements_of
from spotline.vm_image.agent.metadata import Metadata
from spotline.vm_image.agent.privileges import AccountMissing, TrainerAccount
from spotline.vm_image.agent.rank_group import RankGroup, rank_events_path, start_ranks
from spotline.vm_image.agent.secret_access import SecretUnavailable, resolve_env
from spotline.vm_image.agent.trainer_process import (
    CannotStart,
    TrainerProcess,
    trainer_command,
    trainer_env,
)
from spotline.vm_image.agent.workspace import hand_over

EVENTS_FILE = "events.jsonl"
CACHE_FOLDER = "cache"
# Beside the job's folder (``jobs/KEY.container-env``): its variables for
# the container runtime, mode 0600.
CONTAINER_ENV_SUFFIX = ".container-env"
# A job that cannot be prepared (its data set, its image or its requirements)
# ends the attempt with this exit code and the reason as its output: the job
# fails at once where no other VM could do better (``unrecoverable``), else
# the failure policy decides, as for a trainer's failure.
EXIT_PREPARE_FAILED = 1


@dataclass(frozen=True)
class Prepared:
    """What the job gets besides its code: its data folder, its venv."""

    data_dir: Path | None = None
    job_env: JobEnv | None = None


def prepare(
    assignment: Assignment,
    account: TrainerAccount | AccountMissing,
    workdir: Path,
    job_dir: Path,
    code_dir: Path,
    data_uri: str | None = None,
    on_install: Callable[[], None] | None = None,
) -> Prepared:
    """Download the data set (``data_uri``: the spec's, or a recorded job's
    snapshot) and install the code's ``requirements.txt``, each reusing what
    this VM already holds (``{workdir}/cache``); ``on_install`` is called
    before the install (the job's INSTALLING_REQUIREMENTS step).

    Raises:
        CannotStart: no trainer account, a data set that is missing or larger
            than the disk's free space, an image that cannot be pulled (the
            runtime's last lines), or a failed install (pip's last lines).
    """
    if isinstance(account, AccountMissing):
        raise CannotStart(str(account), 126)
    spec = assignment.spec
    cache = workdir / CACHE_FOLDER
    try:
        data_dir = fetch_data(data_uri, workdir) if data_uri else None
    except DataUnavailable as err:
        raise CannotStart(
            f"cannot start the trainer: {err}", EXIT_PREPARE_FAILED, unrecoverable=True
        ) from None
    if spec.image:
        try:
            pull_image(spec.image, os.environ)
        except BadContainerSetup as err:
            raise CannotStart(f"cannot start the trainer: {err}", 126) from None
        except PullFailed as err:
            raise CannotStart(
                f"cannot start the trainer: {err}",
                EXIT_PREPARE_FAILED,
                unrecoverable=err.unrecoverable,
            ) from None
    requirements = requirements_of(code_dir)
    if requirements is None:
        return Prepared(data_dir)
    if spec.image:
        logs.warning(f"{requirements.name} not installed: the image {spec.image} brings its own")
        return Prepared(data_dir)
    env = {**os.environ, **spec.env, **_home(job_dir, account)}
    if on_install is not None:
        on_install()
    try:
        return Prepared(data_dir, prepare_env(requirements, cache, account, env))
    except InstallFailed as err:
        raise CannotStart(
            f"cannot start the trainer: {err}", EXIT_PREPARE_FAILED, unrecoverable=err.unrecoverable
        ) from None


def remove_earlier_containers(assignment: Assignment) -> None:
    """Remove the containers the agent started earlier on this VM (an
    earlier job's, or this attempt's whose agent died), before this job's
    trainer starts.

    Raises:
        CannotStart: one is still there, whatever the job (it may hold the
            GPU: the trainer would fail with an obscure out-of-memory error),
            or the runtime could not list them for a job in a container (it
            could not run one either). A job without an image starts
            anyway when the runtime cannot list them, saying so.
    """
    labels = {"job_id": assignment.job_id, "attempt": assignment.attempt}
    try:
        remove_agent_containers(os.environ, **labels)
    except ContainersLeft as err:
        if err.names or assignment.spec.image:
            raise CannotStart(f"cannot start the trainer: {err}", EXIT_PREPARE_FAILED) from None
        logs.warning(f"{err}; the trainer, which runs in no container, starts anyway", **labels)


def _home(job_dir: Path, account: TrainerAccount) -> dict[str, str]:
    """pip's HOME (and so its cache) is the job's, as the trainer's will be."""
    if not account.dedicated:
        return {}
    account.give(job_dir)  # its code (requirements.txt) and HOME are read by pip
    return {"HOME": str(job_dir / "home"), "TMPDIR": str(job_dir / "tmp")}


def launch_trainer(
    assignment: Assignment,
    account: TrainerAccount | AccountMissing,
    metadata: Metadata,
    job_dir: Path,
    code_dir: Path,
    instance: str,
    on_report: Callable[[dict[str, Any]], None],
    prepared: Prepared | None = None,
) -> TrainerProcess | RankGroup:
    """Start the job's trainer as ``account`` in ``code_dir``, with what
    ``prepare`` made ready: ``SPOTLINE_DATA_DIR``, the job's venv first on
    PATH, and the spec's ``image`` wrapped around the command. One process,
    or one per rank where the node runs several (``rank_group``); a
    container is one process (what it runs starts its own ranks).

    Secret Manager references in the spec's env are resolved here, last, and
    go only into the trainer's environment (and the list of values its
    relayed output is masked with).

    Raises:
        CannotStart: no trainer account, a secret that cannot be read, or a
            program that cannot run; the message names what, never a value.
    """
    if isinstance(account, AccountMissing):
        raise CannotStart(str(account), 126)
    try:
        secrets = resolve_env(assignment.spec.env, assignment.project, metadata)
    except SecretUnavailable as err:
        raise CannotStart(f"cannot start the trainer: {err}", 126) from None
    events_path = job_dir / EVENTS_FILE
    ppn = processes_per_node(assignment.spec, assignment.gpus)
    for local_rank in range(1, ppn):  # made before the folder is handed over
        rank_events_path(events_path, local_rank).touch()
    env = trainer_env(assignment, events_path, dict(os.environ), instance)
    env.update(secrets)
    env.update(hand_over(job_dir, account, events_path))
    prepared = prepared or Prepared()
    command = trainer_command(assignment)
    if prepared.data_dir is not None:
        env[DATA_DIR_ENV] = str(prepared.data_dir)
    if prepared.job_env is not None:
        bin_dir = str(prepared.job_env.bin)
        env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", os.defpath)])
        env["VIRTUAL_ENV"] = str(prepared.job_env.root)
        if command[0] == sys.executable:  # a built-in trainer: the job's python runs it
            command[0] = str(prepared.job_env.python)
    on_kill: Callable[[], None] | None = None
    if assignment.spec.image:
        command, env, on_kill = _in_container(
            assignment, command, env, job_dir, code_dir, account, prepared
        )
    if ppn > 1:
        return start_ranks(
            ppn, assignment, instance, command, env, code_dir,
            events_path, on_report, account, list(secrets.values()),
        )  # fmt: skip
    return TrainerProcess(
        command,
        env,
        code_dir,
        events_path,
        on_report,
        labels={"job_id": assignment.job_id, "attempt": assignment.attempt},
        # The container runtime's client runs as the agent (access to its
        # socket is root's), with the agent's environment; the container
        # itself as the account (--user).
        account=None if assignment.spec.image else account,
        secrets=list(secrets.values()),
        on_kill=on_kill,
    )


def _in_container(
    assignment: Assignment,
    command: list[str],
    env: dict[str, str],
    job_dir: Path,
    code_dir: Path,
    account: TrainerAccount,
    prepared: Prepared,
) -> tuple[list[str], dict[str, str], Callable[[], None]]:
    """The runtime's argv, the client's environment (the agent's own), and
    what kills the container (a SIGKILL to the client leaves it running):
    the trainer's variables go into an env file beside the job's folder,
    root's alone (the folder itself is the trainer's), removed, as the folder is,
    before the next job.

    Raises:
        CannotStart: no usable runtime, or a variable an env file cannot carry.
    """
    spec = assignment.spec
    assert spec.image is not None
    mounts = [(job_dir, False)]
    if prepared.data_dir is not None:
        mounts.append((prepared.data_dir, True))
    env_file = job_dir.with_name(f"{job_dir.name}{CONTAINER_ENV_SUFFIX}")
    name = container_name(assignment.job_id, assignment.attempt, assignment.generation)
    try:
        write_env_file(env_file, env, os.environ)
        argv = container_command(
            spec.image,
            command,
            env_file,
            os.environ,
            mounts,
            code_dir,
            (account.uid, account.gid),
            name,
        )
    except BadContainerSetup as err:
        raise CannotStart(f"cannot start the trainer: {err}", 126) from None
    labels = {"job_id": assignment.job_id, "attempt": assignment.attempt}
    return argv, dict(os.environ), lambda: kill_container(name, os.environ, **labels)
