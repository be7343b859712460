"""The job's own Python environment: ``requirements.txt`` at the root of
``code_uri``, installed before the trainer starts.

A venv made with ``--system-site-packages`` sees the base interpreter's
packages, but the image's torch, TensorFlow and spotline live in the agent's
own venv (/opt/spotline/venv), which that flag does not reach: a ``.pth``
file in the job's venv adds the agent's site-packages *after* its own, so a
requirement pinned by the job wins and everything else the image has stays
importable.

pip runs as the trainer's account (a requirement's build runs code from the
package index; never as root), with the job's environment: pip options go in
the requirements file itself (``--no-index``, ``--find-links DIR``,
``--index-url URL``: pip reads them there) or in the spec's ``env`` as pip's
own variables (``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, ``PIP_NO_INDEX``).

Cache: a reused VM keeps the last environment under
``{workdir}/cache/envs/{hash}``, the hash of the requirements file (and of
the interpreter); the same file again skips the install. A venv is marked
complete only after pip succeeds: an install cut short is made again. One
environment is kept at a time. Once pip is done the agent takes the venv
over (its owner, read-only to everyone else): the trainer runs as the
account pip ran as, and must not change (a ``pip install`` at run time, a
``.pth`` file) what the next job with the same file reuses.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from spotline.shared import logs
from spotline.vm_image.agent.privileges import TrainerAccount

REQUIREMENTS = "requirements.txt"
ENVS_FOLDER = "envs"
_COMPLETE = ".spotline-complete"
_AGENT_SITE = "spotline-agent-site.pth"
# pip's last lines make the job's error: enough for the requirement that failed.
_PIP_TAIL_LINES = 15
# A requirement building from source can take long; a hung index must not
# hold the VM for ever (the job's max_runtime_s also applies).
PIP_TIMEOUT_S = 1800


# What pip prints when the requirements themselves are wrong: a name or a
# version no index has, versions that conflict, a line that is no requirement,
# a package that does not build here. Another VM reads the same index with the
# same interpreter and fails the same way.
_UNRECOVERABLE = (
    "No matching distribution found",
    "ResolutionImpossible",
    "conflicting dependencies",
    "Invalid requirement",
    "Could not open requirements file",
    "Failed to build",
    "requires a different Python",
)
# What pip prints when the index could not be reached (it then also says no
# version was found: these decide). Another VM, later, may reach it. pip warns
# of a connection error only as it retries (PIP_RETRIES, 5 by default): with
# no retry, an index out of reach reads as a requirement it does not have.
_TRANSIENT = (
    "NewConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "Temporary failure in name resolution",
    "Connection reset",
    "Connection refused",
    "ProxyError",
    "SSLError",
    "HTTP error 5",
    "No space left on device",
)


class InstallFailed(RuntimeError):
    """pip (or venv) failed; the message holds its last lines.
    ``unrecoverable``: the requirements are wrong, not the moment (see
    ``unrecoverable_output``)."""

    def __init__(self, message: str, unrecoverable: bool = False) -> None:
        super().__init__(message)
        self.unrecoverable = unrecoverable


def unrecoverable_output(output: str) -> bool:
    """Whether pip's output says no VM can install these requirements: one of
    its messages for wrong requirements, and no sign of a network or disk
    trouble (which a new attempt may not meet). Anything else (a timeout, a
    message not known here) is left to the job's failure policy."""
    if any(sign in output for sign in _TRANSIENT):
        return False
    return any(sign in output for sign in _UNRECOVERABLE)


@dataclass(frozen=True)
class JobEnv:
    """A ready venv: its ``python`` and its ``bin`` folder (first on PATH)."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"


def requirements_of(code_dir: Path) -> Path | None:
    """The job's requirements file, if its code has one (not through a link)."""
    path = code_dir / REQUIREMENTS
    return path if path.is_file() and not path.is_symlink() else None


def prepare_env(
    requirements: Path, cache: Path, account: TrainerAccount, env: dict[str, str]
) -> JobEnv:
    """A venv with ``requirements`` installed, reused when the same file was
    installed before on this VM.

    Args:
        requirements: the job's ``requirements.txt``.
        cache: ``{workdir}/cache``; the venv goes under ``envs/``.
        account: who pip runs as (and who owns the venv).
        env: the trainer's environment, which pip runs with.

    Raises:
        InstallFailed: venv or pip failed; pip's last lines in the message.
    """
    digest = hashlib.sha256(requirements.read_bytes() + sys.executable.encode()).hexdigest()
    envs = cache / ENVS_FOLDER
    envs.mkdir(parents=True, exist_ok=True)
    envs.chmod(0o755)
    root = envs / digest[:16]
    if (root / _COMPLETE).exists() and root.stat().st_uid == os.geteuid():
        logs.info(f"{REQUIREMENTS} already installed in {root}: reused")
        return JobEnv(root)
    for entry in envs.iterdir():  # one environment at a time; a half-made one too
        shutil.rmtree(entry, ignore_errors=True)
    root.mkdir()
    account.give(root)
    # No pip of its own: the agent's, seen through the .pth, installs into it.
    venv = [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root)]
    _run(venv, account, env, "python -m venv")
    _link_agent_site(JobEnv(root), account, env)
    pip = [str(JobEnv(root).python), "-m", "pip", "install", "--disable-pip-version-check"]
    _run([*pip, "-r", str(requirements)], account, env, f"pip install -r {REQUIREMENTS}")
    _take_over(root)
    (root / _COMPLETE).write_text(digest)
    logs.info(f"{REQUIREMENTS} installed in {root}")
    return JobEnv(root)


def _link_agent_site(job_env: JobEnv, account: TrainerAccount, env: dict[str, str]) -> None:
    """Add the agent's site-packages (the image's torch, TF, spotline and
    pip itself) to the venv, after its own."""
    query = [str(job_env.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
    purelib = Path(_run(query, account, env, "python -c sysconfig").strip().splitlines()[-1])
    agent_sites = [path for path in site.getsitepackages() if os.path.isdir(path)]
    (purelib / _AGENT_SITE).write_text("".join(f"{path}\n" for path in agent_sites))
    account.give(purelib / _AGENT_SITE)


def _take_over(root: Path) -> None:
    """Make the venv the agent's, readable and runnable by every account,
    writable by none other: what pip left is what the next job gets. Links
    are changed, not followed (``bin/python`` points at the interpreter)."""
    uid, gid = os.geteuid(), os.getegid()
    for folder, dirs, files in os.walk(root):
        os.chown(folder, uid, gid, follow_symlinks=False)
        os.chmod(folder, 0o755)
        for name in dirs + files:
            path = os.path.join(folder, name)
            os.chown(path, uid, gid, follow_symlinks=False)
            if os.path.islink(path) or name in dirs:
                continue  # a folder is done when walked into
            executable = os.stat(path).st_mode & 0o100
            os.chmod(path, 0o755 if executable else 0o644)


def _run(command: list[str], account: TrainerAccount, env: dict[str, str], what: str) -> str:
    # The venv is in PATH of nothing yet: pip and venv run with the job's
    # environment otherwise (its PIP_* variables, its HOME for pip's cache).
    try:
        done = subprocess.run(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=PIP_TIMEOUT_S,
            check=False,
            **account.popen_kwargs(),
        )
    except subprocess.TimeoutExpired:
        raise InstallFailed(f"{what} did not finish in {PIP_TIMEOUT_S} s") from None
    except OSError as err:
        raise InstallFailed(f"{what} could not start: {err}") from None
    output = done.stdout.decode("utf-8", errors="replace")
    if done.returncode != 0:
        tail = "\n".join(output.rstrip().splitlines()[-_PIP_TAIL_LINES:])
        raise InstallFailed(
            f"{what} failed (exit code {done.returncode}):\n{tail}", unrecoverable_output(output)
        )
    return output
