"""Running the job's command in its own container image (the spec's ``image``).

The agent's contract does not change: the container's process is the
trainer. ``docker run`` stays in the foreground, so the agent starts, waits
for and signals the client as it would the command: docker proxies SIGTERM
(the preemption notice) to the container (``--sig-proxy``, on by default
when attached), and ``--init`` puts a tiny init in front of the command that
forwards it and reaps children. The job's folder (code, events file,
TensorBoard logs, HOME and TMPDIR) and the data folder are mounted at the
same paths, so every ``SPOTLINE_*`` path means the same inside; the command
runs as the trainer's account (``--user uid:gid``) with the GPUs passed
through (``--gpus all``, the Deep Learning VM image's NVIDIA container
runtime), on the host's network (multi-node jobs reach each other as without
a container).

SIGKILL is the one signal the client cannot pass on: killed, it leaves the
container running (its GPU, its ports and its name held). So where the agent
kills a trainer that did not stop in time, a container is killed through the
runtime as well (``kill_container``: ``docker kill NAME``). Its name holds the
attempt and the gang's regroup generation (``container_name``): the trainer
restarted in the same attempt after a regroup never meets the name of the
container it replaces, which docker holds until that one is removed.

Every container the agent starts carries the label ``spotline.agent=1``
(``AGENT_LABEL``). Before a job's trainer starts (the agent's first job, a
cooling VM's next one, a restart after a regroup), every container with that
label, running or not, is removed (``remove_agent_containers``: ``docker ps``
by the label, ``docker rm --force`` each): an earlier job's container whose
kill failed, or one whose agent died (an OOM kill takes the client, never
the container the daemon runs), would hold the GPU, its ports and its memory,
and a restarted agent's own container would meet its name. Only that label
is looked for: a user's own containers on the VM are never touched.

The client runs as the agent (access to the runtime's socket is root's), so
nothing of the job may reach it: the runtime is an absolute path the image
provides (never looked up on a PATH), it starts with the agent's own
environment, and the job's variables go to the container in an env file
(``--env-file``) only root can read, never into the client's environment
(where ``LD_PRELOAD`` or ``PATH`` would choose what root runs) nor onto its
command line (where a secret's value would show).

The runtime is a setting, ``SPOTLINE_CONTAINER_RUNTIME`` (default
``/usr/bin/docker``; podman takes the same arguments).

The image is pulled first, on its own (``pull_image``), so an image that
cannot be pulled ends the attempt before the trainer, naming the runtime's
message, instead of passing for the trainer's own failure (``docker run``
exits 125 either way). The registry's answer decides what follows: an image
or tag that does not exist, a name that is not one, or access refused to the
VM's account is the same on every VM (the job fails at once); a registry or
daemon out of reach may not be (the failure policy decides).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from spotline.shared import logs

RUNTIME_ENV = "SPOTLINE_CONTAINER_RUNTIME"
DEFAULT_RUNTIME = "/usr/bin/docker"
# A large image over a slow link takes long; a hung registry must not hold the
# VM for ever (the job's max_runtime_s also applies).
PULL_TIMEOUT_S = 1800
_PULL_TAIL_LINES = 10
# ``docker kill`` returns once the signal is sent; a daemon that does not
# answer must not hold the agent's stop of the gang.
KILL_TIMEOUT_S = 30
# The label on every container the agent starts, and the only one it removes.
AGENT_LABEL = "spotline.agent=1"
# ``docker rm --force`` waits for the killed container to exit: a daemon that
# does not answer must not hold the VM's start for ever.
CLEANUP_TIMEOUT_S = 60
# The runtime's words for a container that is gone or going: docker's and
# podman's for a missing name (docker's current ``rm --force`` exits 0 with
# them, older ones 1), and docker's while it removes a ``--rm`` container
# that exited (its processes are gone).
_GONE = ("no such container", "is already in progress")
# The registry's answers that no other VM would get otherwise (docker's and
# podman's words): checked after _PULL_TRANSIENT.
_PULL_UNRECOVERABLE = (
    "manifest unknown",
    "not found",
    "repository does not exist",
    "invalid reference format",
    "pull access denied",
    "denied:",
    "unauthorized",
    "no matching manifest",
)
# Out of reach for now: the network, the registry's load, the daemon.
_PULL_TRANSIENT = (
    "i/o timeout",
    "TLS handshake timeout",
    "context deadline exceeded",
    "connection refused",
    "connection reset",
    "no such host",
    "toomanyrequests",
    "Service Unavailable",
    "Internal Server Error",
    "Cannot connect to the Docker daemon",
)


class PullFailed(RuntimeError):
    """The image could not be pulled; the message holds the runtime's last
    lines, ``unrecoverable`` says no other VM would do better."""

    def __init__(self, message: str, unrecoverable: bool) -> None:
        super().__init__(message)
        self.unrecoverable = unrecoverable


def pull_image(image: str, host_env: Mapping[str, str]) -> None:
    """``docker pull IMAGE`` as the agent (the runtime's socket is root's).

    Raises:
        BadContainerSetup: the runtime setting is not an absolute path to a program.
        PullFailed: the runtime failed, did not start or did not finish in time.
    """
    runtime = runtime_of(host_env)
    what = f"{runtime} pull {image}"
    done = _run([runtime, "pull", image], PULL_TIMEOUT_S)
    if isinstance(done, str):
        raise PullFailed(f"{what} {done}", False)
    if done.returncode == 0:
        return
    output = done.stdout.decode("utf-8", errors="replace")
    tail = "\n".join(output.rstrip().splitlines()[-_PULL_TAIL_LINES:])
    raise PullFailed(
        f"{what} failed (exit code {done.returncode}):\n{tail}", unrecoverable_pull(output)
    )


def _run(
    argv: list[str], timeout_s: float, apart: bool = False
) -> subprocess.CompletedProcess[bytes] | str:
    """The runtime's ``argv`` run as the agent, its output kept (with its
    errors, or ``apart`` from them in ``stderr``); what went wrong instead
    when it could not start or did not finish in ``timeout_s``."""
    try:
        return subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if apart else subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"did not finish in {timeout_s:g} s"
    except OSError as err:
        return f"could not start: {err}"


def unrecoverable_pull(output: str) -> bool:
    """Whether the runtime's output says the image cannot be pulled from any VM."""
    lowered = output.lower()
    if any(sign.lower() in lowered for sign in _PULL_TRANSIENT):
        return False
    return any(sign.lower() in lowered for sign in _PULL_UNRECOVERABLE)


# The host's variables that mean nothing inside the image (its own PATH,
# Python and shell state), never passed even when the agent set them.
_HOST_ONLY = frozenset({"PATH", "PYTHONPATH", "VIRTUAL_ENV", "PWD", "OLDPWD", "SHLVL", "_"})


class BadContainerSetup(ValueError):
    """The runtime setting or a variable cannot be used; the message says which."""


def runtime_of(host_env: Mapping[str, str]) -> str:
    """The runtime's absolute path, from the agent's own environment.

    Raises:
        BadContainerSetup: the setting is not an absolute path to a program.
    """
    runtime = host_env.get(RUNTIME_ENV) or DEFAULT_RUNTIME
    if not os.path.isabs(runtime):
        raise BadContainerSetup(
            f"{RUNTIME_ENV}={runtime!r} is not an absolute path: name the runtime's program "
            f"(e.g. {DEFAULT_RUNTIME}); it is never looked up on a PATH"
        )
    if not os.access(runtime, os.X_OK) or not os.path.isfile(runtime):
        raise BadContainerSetup(
            f"the container runtime {runtime} ({RUNTIME_ENV}) is not a program on this VM"
        )
    return runtime


def container_name(job_id: str, attempt: int, generation: int) -> str:
    """The container's name: one per attempt and regroup generation, as the
    trainer restarted in the same attempt after a regroup must not meet the
    name of the container it replaces (still held while that one is removed,
    or for ever by one whose client was killed). A job id is lowercase
    letters, digits and hyphens, so docker's rule for names
    (``[a-zA-Z0-9][a-zA-Z0-9_.-]+``) holds."""
    return f"spotline-{job_id}-a{attempt}-g{generation}"


def kill_container(name: str, host_env: Mapping[str, str], **labels: object) -> None:
    """``docker kill NAME`` as the agent: SIGKILL to the container, which
    its client cannot pass on. A failure is logged, never raised (the
    client is killed anyway)."""
    try:
        runtime = runtime_of(host_env)
    except BadContainerSetup as err:
        logs.warning(f"cannot kill the container {name}: {err}", **labels)
        return
    what = f"{runtime} kill {name}"
    done = _run([runtime, "kill", name], KILL_TIMEOUT_S)
    if isinstance(done, str) or done.returncode != 0:
        logs.warning(f"{what} {_failed(done)}", **labels)


class ContainersLeft(RuntimeError):
    """Containers the agent started earlier may still hold the VM: ``names``
    could not be removed, or (``names`` empty) the runtime could not list
    them. The message names each, the runtime's words and what to do."""

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


def remove_agent_containers(host_env: Mapping[str, str], **labels: object) -> list[str]:
    """``docker rm --force`` every container with ``AGENT_LABEL``, running or
    not, as the agent; each is logged. The names removed. With no runtime on
    the VM there is no container either: nothing is done.

    Raises:
        ContainersLeft: the runtime could not list them, or one is still there.
    """
    try:
        runtime = runtime_of(host_env)
    except BadContainerSetup:
        return []
    argv = [runtime, "ps", "--all", "--filter", f"label={AGENT_LABEL}", "--format", "{{.Names}}"]
    listed = _run(argv, CLEANUP_TIMEOUT_S, apart=True)
    if isinstance(listed, str) or listed.returncode != 0:
        raise ContainersLeft(
            f"`{' '.join(argv)}` {_failed(listed)}: whether a container spotline started "
            "earlier still runs on this VM (holding the GPU, ports or memory a trainer needs) "
            "is unknown; "
            f"check the container runtime's daemon (`systemctl status {Path(runtime).name}`)",
            [],
        )
    # A container linked to another has several names, the first its own.
    names = [line.split(",")[0] for line in listed.stdout.decode(errors="replace").split()]
    removed, left = [], []
    for name in names:
        done = _run([runtime, "rm", "--force", name], CLEANUP_TIMEOUT_S)
        said = "" if isinstance(done, str) else done.stdout.decode(errors="replace")
        if isinstance(done, str) or (
            done.returncode != 0 and not any(sign in said.lower() for sign in _GONE)
        ):
            left.append(f"`{runtime} rm --force {name}` {_failed(done)}")
            continue
        removed.append(name)
        logs.warning(
            f"removed the container {name}, which spotline started earlier on this VM "
            "(an earlier job's, or one whose agent died): it would hold the GPU, ports and "
            "memory the next trainer needs",
            **labels,
        )
    if left:
        raise ContainersLeft(
            f"{'; '.join(left)}. A container spotline started earlier is still on this VM and "
            "may hold the GPU, ports or memory the trainer needs, so the trainer is not started: "
            f"remove it on the VM (`sudo {runtime} rm --force NAME`) before the job runs there",
            [name for name in names if name not in removed],
        )
    return removed


def _failed(done: subprocess.CompletedProcess[bytes] | str) -> str:
    """The runtime's failure as a message: its exit code and last words, or
    why it did not run (``_run``'s words)."""
    if isinstance(done, str):
        return done
    said = done.stdout + (done.stderr or b"")
    return f"failed (exit code {done.returncode}): {said.decode(errors='replace').strip()[-500:]}"


def container_command(
    image: str,
    command: list[str],
    env_file: Path,
    host_env: Mapping[str, str],
    mounts: list[tuple[Path, bool]],
    workdir: Path,
    user: tuple[int, int],
    name: str,
) -> list[str]:
    """The argv that runs ``command`` in ``image``.

    Args:
        env_file: the container's variables (``write_env_file``).
        host_env: the agent's environment, where the runtime setting is read.
        mounts: folders to mount at the same path, each with read-only or not.
        workdir: the command's working folder (the job's code).
        user: uid and gid the command runs as.
        name: the container's name (``container_name``).

    Raises:
        BadContainerSetup: no usable runtime (``runtime_of``).
    """
    argv = [runtime_of(host_env), "run", "--rm", "--init", "--gpus", "all", "--network", "host"]
    argv += ["--name", name, "--label", AGENT_LABEL]
    argv += ["--user", f"{user[0]}:{user[1]}", "--workdir", str(workdir)]
    for folder, read_only in mounts:
        argv += ["--volume", f"{folder}:{folder}{':ro' if read_only else ''}"]
    argv += ["--env-file", str(env_file)]
    return [*argv, image, *command]


def write_env_file(path: Path, env: Mapping[str, str], host_env: Mapping[str, str]) -> list[str]:
    """Write the container's variables to ``path`` (mode 0600, made afresh,
    never through a link), one ``NAME=VALUE`` a line as docker reads them:
    what the trainer's environment adds to or changes from the agent's own.
    The names written.

    Raises:
        BadContainerSetup: a value holds a line break (docker's env file
            cannot carry one) or a name is not a plain variable name.
    """
    names = sorted(passed_names(env, host_env))
    lines = []
    for name in names:
        value = env[name]
        if "\n" in value or "\r" in value or "\0" in value:
            raise BadContainerSetup(
                f"the variable {name} has a line break or NUL in its value, which a container's "
                "env file cannot carry: encode it (base64) or pass a file in the job's folder"
            )
        if not name or "=" in name or "\n" in name or name.startswith("#"):
            raise BadContainerSetup(f"the variable name {name!r:.80} cannot go to a container")
        lines.append(f"{name}={value}\n")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("".join(lines))
    return names


def passed_names(env: Mapping[str, str], host_env: Mapping[str, str]) -> set[str]:
    """The variables the container gets: what the trainer's environment adds
    to or changes from the agent's own."""
    return {
        name
        for name, value in env.items()
        if name not in _HOST_ONLY and host_env.get(name) != value
    }
