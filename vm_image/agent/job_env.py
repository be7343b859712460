"""The job's own Python environment: ``requirements.txt`` at the root of
``code_uri``, installed before the trainer starts.

A venv made with ``--system-site-packages`` sees the base interpreter's
packages, but the image's torch, TensorFlow and spotline live in the agent's
own venv (/opt/spotline/venv), which that flag does not reach: a ``.pth``
file in the job's venv adds the agent's site-packages *after* its own, so a
requirement pinned by the job wins and everything else the image has stays
importable.

The agent makes the venv and writes the ``.pth`` itself, at paths it knows
(never at one the venv's python prints: the job's environment steers what
that prints). pip runs as the trainer's account (a requirement's build runs
code from the package index; never as root), with the job's environment: pip options go in
the requirements file itself (``--no-index``, ``--find-links DIR``,
``--index-url URL``: pip reads them there) or in the spec's ``env`` as pip's
own variables (``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, ``PIP_NO_INDEX``).

Cache: a reused VM keeps the last environment under
``{workdir}/cache/envs/{hash}``, the hash of the requirements file (and of
the interpreter); the same file again skips the install. A venv is marked
complete only after pip succeeds: an install cut short is made again. One
environment is kept at a time. Once pip's process has exited, every process
of the trainer's account is killed (a daemon the install started could
otherwise write a venv file after root owns it, or hold pip's output open,
which made the install wait out its timeout), what is left of pip's output is
read for a few seconds at most, and then the agent takes the venv
over (its owner, read-only to everyone else): the trainer runs as the
account pip ran as, and must not change (a ``pip install`` at run time, a
``.pth`` file) what the next job with the same file reuses.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import selectors
import shutil
import site
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from spotline.shared import logs
from spotline.vm_image.agent.privileges import TrainerAccount
from spotline.vm_image.agent.workspace import stop_leftovers

REQUIREMENTS = "requirements.txt"
ENVS_FOLDER = "envs"
_COMPLETE = ".spotline-complete"
_AGENT_SITE = "spotline-agent-site.pth"
# pip's last lines make the job's error: enough for the requirement that failed.
_PIP_TAIL_LINES = 15
# A requirement building from source can take long; a hung index must not
# hold the VM for ever (the job's max_runtime_s also applies).
PIP_TIMEOUT_S = 1800
# Once pip has exited and the account's processes are killed, what is left in
# its pipe is read for this long at most (a process that holds the pipe and
# is not the account's, locally the agent's own, is not waited for).
_DRAIN_S = 5.0
_POLL_S = 0.2


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
    # 1. The agent makes the venv and links its own site-packages into it:
    #    its interpreter, its environment, paths it knows. Nothing the job
    #    brings (its env, a sitecustomize) runs while root writes.
    venv = [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root)]
    _run(venv, None, _agent_env(), "python -m venv")
    _write_agent_site(root)
    # 2. pip (the agent's, seen through the .pth) installs as the account.
    account.give(root)
    pip = [str(JobEnv(root).python), "-m", "pip", "install", "--disable-pip-version-check"]
    # 3. Whatever the install started has ended before root takes the venv:
    #    a process still running could keep a file open and write it after,
    #    or swap a file for a link while root walks the tree. It ends when
    #    pip does: one that holds pip's output open does not hold the install.
    try:
        _run(
            [*pip, "-r", str(requirements)], account, env, f"pip install -r {REQUIREMENTS}",
            ended=lambda: _end_processes(account),
        )  # fmt: skip
    finally:
        _end_processes(account)  # pip did not start, or failed to
    _take_over(root)
    _write_agent_site(root)  # what the account may have changed there
    _write_new(root, root / _COMPLETE, digest)
    logs.info(f"{REQUIREMENTS} installed in {root}")
    return JobEnv(root)


def _purelib(root: Path) -> Path:
    """The venv's site-packages, as ``venv`` lays it out for this interpreter
    (never asked of the venv's python, whose answer its environment steers)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return root / "lib" / version / "site-packages"


def _write_agent_site(root: Path) -> None:
    """Add the agent's site-packages (the image's torch, TF, spotline and
    pip itself) to the venv, after its own."""
    agent_sites = [path for path in site.getsitepackages() if os.path.isdir(path)]
    text = "".join(f"{path}\n" for path in agent_sites)
    _write_new(root, _purelib(root) / _AGENT_SITE, text)


def _write_new(root: Path, path: Path, text: str) -> None:
    """Write ``path`` (in the venv ``root``) afresh, refusing a link in its
    place or on the way to it from ``root``: the account owned these
    folders a moment ago, and root must not write where a link points."""
    for folder in [*reversed(path.relative_to(root).parents)][1:]:
        if (root / folder).is_symlink() or not (root / folder).is_dir():
            raise InstallFailed(f"{root / folder} is not the folder venv made: refused")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _end_processes(account: TrainerAccount) -> None:
    """Kill every process of the account (the install's, and what it left).
    Run as the agent's own user (locally), the install holds no privilege
    to protect and its processes are the agent's own: nothing is killed."""
    if account.dedicated:
        stop_leftovers(account.uid)


def _agent_env() -> dict[str, str]:
    """The agent's own environment, without what steers a Python."""
    return {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}


def _take_over(root: Path) -> None:
    """Make the venv the agent's, readable and runnable by every account,
    writable by none other: what pip left is what the next job gets. Links
    are changed, not followed (``bin/python`` points at the interpreter).
    Every process of the account has ended: nothing changes the tree while
    it is walked."""
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


def _run(
    command: list[str],
    account: TrainerAccount | None,
    env: dict[str, str],
    what: str,
    ended: Callable[[], None] = lambda: None,
) -> str:
    """Run ``command`` (as ``account``; None: as the agent) with ``env``, and
    return its output (stdout and stderr, together).

    It is done when its process exits, not when its output ends: a process
    it started may hold the pipe open for ever. Then ``ended()`` runs (it
    ends whatever the command left), and what is still in the pipe is read
    for ``_DRAIN_S`` at most.
    """
    try:
        process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            **(account.popen_kwargs() if account else {}),
        )
    except OSError as err:
        raise InstallFailed(f"{what} could not start: {err}") from None
    assert process.stdout is not None
    pipe = _Pipe(process.stdout)
    try:
        finished = pipe.read_while(lambda: process.poll() is not None, PIP_TIMEOUT_S)
        if not finished:
            process.kill()
        process.wait()
        ended()
        pipe.read_while(lambda: False, _DRAIN_S)
    finally:
        pipe.close()
    if not finished:
        raise InstallFailed(f"{what} did not finish in {PIP_TIMEOUT_S} s")
    output = pipe.text()
    if process.returncode != 0:
        tail = "\n".join(output.rstrip().splitlines()[-_PIP_TAIL_LINES:])
        raise InstallFailed(
            f"{what} failed (exit code {process.returncode}):\n{tail}",
            unrecoverable_output(output),
        )
    return output


class _Pipe:
    """The read end of a command's output, read without blocking."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._chunks: list[bytes] = []
        self._open = True
        os.set_blocking(stream.fileno(), False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(stream, selectors.EVENT_READ)

    def read_while(self, done: Callable[[], bool], limit_s: float) -> bool:
        """Read until ``done()``, the end of the output, or ``limit_s``; False
        on the limit. At the end of the output, wait for ``done()`` alone."""
        deadline = time.monotonic() + limit_s
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not self._open:
                time.sleep(min(left, _POLL_S))
                continue
            if self._selector.select(min(left, _POLL_S)):
                self._read()
        return True

    def _read(self) -> None:
        try:
            chunk = os.read(self._stream.fileno(), 65536)
        except BlockingIOError:
            return
        if chunk:
            self._chunks.append(chunk)
        else:  # every writer has closed it
            self._selector.unregister(self._stream)
            self._open = False

    def text(self) -> str:
        return b"".join(self._chunks).decode("utf-8", errors="replace")

    def close(self) -> None:
        self._selector.close()
        self._stream.close()
