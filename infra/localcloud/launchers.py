"""VM launchers: what a booted local VM is.

``ProcessLauncher`` boots each VM as a process (the real agent, or a given
command) in its own process group, with its own metadata server named in
``GCE_METADATA_HOST`` and its output in ``WORKDIR/vms/NAME.log``.
``RecordLauncher`` boots nothing: it records the boots and the signals, and a
VM it "runs" exits at once on SIGTERM or SIGKILL (tests that need no process).

Either way the launcher calls ``on_exit(code)`` once when the boot ends; the
model then lists the VM TERMINATED (or forgets it, when it was being removed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from spotline.infra.localcloud.errors import ModelError
from spotline.infra.localcloud.metadata_server import Identity, MetadataServer

log = logging.getLogger(__name__)

OnExit = Callable[[int], None]


class Run(Protocol):
    """One boot of one VM."""

    pid: int | None
    metadata_host: str
    exited: threading.Event

    def signal(self, sig: signal.Signals) -> None: ...
    def set_attributes(self, items: Mapping[str, str]) -> None: ...
    def set_preempted(self) -> None: ...


class Launcher(Protocol):
    def launch(self, identity: Identity, attributes: Mapping[str, str], on_exit: OnExit) -> Run:
        """Boot the VM; raise ``ModelError`` when it cannot start."""
        ...


class _Process:
    """A VM's agent process and its metadata server."""

    def __init__(
        self, process: subprocess.Popen[bytes], metadata: MetadataServer, on_exit: OnExit
    ) -> None:
        self.process = process
        self.pid: int | None = process.pid
        self.metadata = metadata
        self.metadata_host = metadata.host
        self.exited = threading.Event()
        self._on_exit = on_exit
        # Held while signalling and while reaping, so that no signal reaches a
        # process group whose id the kernel may have handed to someone else.
        self._signal_lock = threading.Lock()
        self._reaped = False
        name = f"reap-{metadata.identity.name}"
        threading.Thread(target=self._reap, name=name, daemon=True).start()

    def signal(self, sig: signal.Signals) -> None:
        with self._signal_lock:
            if self._reaped:
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def set_attributes(self, items: Mapping[str, str]) -> None:
        self.metadata.set_attributes(items)

    def set_preempted(self) -> None:
        self.metadata.set_preempted()

    def _reap(self) -> None:
        # Wait without reaping, so the leader's pid (= the group id) stays ours
        # while we SIGKILL whatever it left in its group; then reap it.
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOWAIT)
        with self._signal_lock:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
            self._reaped = True
        self.metadata.close()
        self._on_exit(code)
        self.exited.set()


class ProcessLauncher:
    """Boots each VM as ``command`` in its own process group.

    Args:
        workdir: the VMs' cwd; their logs go to ``workdir/vms/NAME.log``.
        command: what every VM runs (the agent: ``python -m spotline.vm_image.agent``).
        env: added to ``os.environ`` for every VM.
    """

    def __init__(
        self, workdir: Path, command: Sequence[str], env: Mapping[str, str] | None = None
    ) -> None:
        self.workdir = Path(workdir)
        self.command = list(command)
        self.env = dict(env or {})
        (self.workdir / "vms").mkdir(parents=True, exist_ok=True)

    def log_path(self, name: str) -> Path:
        return self.workdir / "vms" / f"{name}.log"

    def launch(self, identity: Identity, attributes: Mapping[str, str], on_exit: OnExit) -> Run:
        metadata = MetadataServer(identity, attributes)
        metadata.start()
        env = {**os.environ, **self.env, "GCE_METADATA_HOST": metadata.host}
        try:
            with self.log_path(identity.name).open("ab") as output:
                process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.workdir,
                    start_new_session=True,
                )
        except OSError as e:
            metadata.close()
            raise ModelError(f"cannot start {identity.name}: {e}") from e
        return _Process(process, metadata, on_exit)


class _Record:
    """A VM that runs nothing: it ends when SIGTERM or SIGKILL reaches it."""

    def __init__(self, name: str, launcher: RecordLauncher, on_exit: OnExit) -> None:
        self.name = name
        self.pid: int | None = None
        self.metadata_host = ""
        self.exited = threading.Event()
        self.attributes: dict[str, str] = {}
        self.preempted = False
        self._launcher = launcher
        self._on_exit = on_exit
        self._lock = threading.Lock()

    def signal(self, sig: signal.Signals) -> None:
        self._launcher.signals.append((self.name, sig))
        if sig not in (signal.SIGTERM, signal.SIGKILL):
            return  # SIGSTOP: frozen, still RUNNING
        with self._lock:
            if self.exited.is_set():
                return
            self._on_exit(-int(sig))
            self.exited.set()

    def set_attributes(self, items: Mapping[str, str]) -> None:
        self.attributes = dict(items)

    def set_preempted(self) -> None:
        self.preempted = True


class RecordLauncher:
    """Boots nothing; records each boot (by VM name) and each signal sent."""

    def __init__(self) -> None:
        self.boots: list[str] = []
        self.signals: list[tuple[str, signal.Signals]] = []

    def launch(self, identity: Identity, attributes: Mapping[str, str], on_exit: OnExit) -> Run:
        self.boots.append(identity.name)
        run = _Record(identity.name, self, on_exit)
        run.set_attributes(attributes)
        return run
