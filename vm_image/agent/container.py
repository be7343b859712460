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

Variables are passed by name only (``--env NAME``: docker copies the value
from its own environment): a secret's value never appears in a command line.

The runtime is a setting, ``SPOTLINE_CONTAINER_RUNTIME`` (default
``docker``; podman takes the same arguments).

The image is pulled first, on its own (``pull_image``), so an image that
cannot be pulled ends the attempt before the trainer, naming the runtime's
message, instead of passing for the trainer's own failure (``docker run``
exits 125 either way). The registry's answer decides what follows: an image
or tag that does not exist, a name that is not one, or access refused to the
VM's account is the same on every VM (the job fails at once); a registry or
daemon out of reach may not be (the failure policy decides).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

RUNTIME_ENV = "SPOTLINE_CONTAINER_RUNTIME"
DEFAULT_RUNTIME = "docker"
# A large image over a slow link takes long; a hung registry must not hold the
# VM for ever (the job's max_runtime_s also applies).
PULL_TIMEOUT_S = 1800
_PULL_TAIL_LINES = 10
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
        PullFailed: the runtime failed, did not start or did not finish in time.
    """
    runtime = host_env.get(RUNTIME_ENV) or DEFAULT_RUNTIME
    what = f"{runtime} pull {image}"
    try:
        done = subprocess.run(
            [runtime, "pull", image],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=PULL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PullFailed(f"{what} did not finish in {PULL_TIMEOUT_S} s", False) from None
    except OSError as err:
        raise PullFailed(f"{what} could not start: {err}", False) from None
    if done.returncode == 0:
        return
    output = done.stdout.decode("utf-8", errors="replace")
    tail = "\n".join(output.rstrip().splitlines()[-_PULL_TAIL_LINES:])
    raise PullFailed(
        f"{what} failed (exit code {done.returncode}):\n{tail}", unrecoverable_pull(output)
    )


def unrecoverable_pull(output: str) -> bool:
    """Whether the runtime's output says the image cannot be pulled from any VM."""
    lowered = output.lower()
    if any(sign.lower() in lowered for sign in _PULL_TRANSIENT):
        return False
    return any(sign.lower() in lowered for sign in _PULL_UNRECOVERABLE)


# The host's variables that mean nothing inside the image (its own PATH,
# Python and shell state), never passed even when the agent set them.
_HOST_ONLY = frozenset({"PATH", "PYTHONPATH", "VIRTUAL_ENV", "PWD", "OLDPWD", "SHLVL", "_"})


def container_command(
    image: str,
    command: list[str],
    env: Mapping[str, str],
    host_env: Mapping[str, str],
    mounts: list[tuple[Path, bool]],
    workdir: Path,
    user: tuple[int, int],
    name: str,
) -> list[str]:
    """The argv that runs ``command`` in ``image``.

    Args:
        env: the trainer's environment; the variables spotline or the spec set
            (those not inherited unchanged from ``host_env``) are passed.
        mounts: folders to mount at the same path, each with read-only or not.
        workdir: the command's working folder (the job's code).
        user: uid and gid the command runs as.
        name: the container's name (one per job attempt).
    """
    runtime = host_env.get(RUNTIME_ENV) or DEFAULT_RUNTIME
    argv = [runtime, "run", "--rm", "--init", "--gpus", "all", "--network", "host"]
    argv += ["--name", name, "--user", f"{user[0]}:{user[1]}", "--workdir", str(workdir)]
    for folder, read_only in mounts:
        argv += ["--volume", f"{folder}:{folder}{':ro' if read_only else ''}"]
    for variable in sorted(passed_names(env, host_env)):
        argv += ["--env", variable]
    return [*argv, image, *command]


def passed_names(env: Mapping[str, str], host_env: Mapping[str, str]) -> set[str]:
    """The variables the container gets: what the trainer's environment adds
    to or changes from the agent's own."""
    return {
        name
        for name, value in env.items()
        if name not in _HOST_ONLY and host_env.get(name) != value
    }
