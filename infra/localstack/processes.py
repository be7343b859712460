"""Child processes started the careful way: own process group, readiness
checked, stopped by pid.

The gcloud emulator commands are wrappers that start a java child; stopping
only the wrapper leaves java running. Every server here is therefore started
in a new session (its own process group) and stopped with ``killpg`` on that
group, never by name.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from spotline.infra.localstack.errors import StackError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ManagedProcess:
    """One server process in its own process group, logging to a file."""

    def __init__(
        self,
        name: str,
        command: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.command = command
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self, check: Callable[[], bool], timeout_s: float = 60.0) -> float:
        """Poll ``check`` until it passes; fail fast if the process died.

        Returns the seconds it took.
        """
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if not self.alive():
                raise StackError(
                    f"{self.name} exited with code {self.process.returncode} before it was "
                    f"ready; see {self.log_path}:\n{self.log_tail()}"
                )
            if check():
                return time.monotonic() - started
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} not ready after {timeout_s} s; see {self.log_path}")

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the whole process group, SIGKILL it after ``grace_s``."""
        for signum, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            # The leader is gone; a java child may still be in the group.
            if not _group_alive(self.process.pid):
                break
        self._log.close()

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(200 <= response.status < 500)
    except urllib.error.HTTPError as err:
        return err.code < 500
    except (urllib.error.URLError, OSError):
        return False
