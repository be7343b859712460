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
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

RUNTIME_ENV = "SPOTLINE_CONTAINER_RUNTIME"
DEFAULT_RUNTIME = "docker"
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
