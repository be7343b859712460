"""The Firestore and Pub/Sub emulators from the installed Google Cloud CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.request
from pathlib import Path

from spotline.infra.localstack.processes import ManagedProcess, free_port, http_ok


class EmulatorsMissing(RuntimeError):
    pass


def gcloud() -> str:
    path = shutil.which("gcloud")
    if path is None:
        raise EmulatorsMissing("the Google Cloud CLI (gcloud) is not on PATH")
    return path


def _sdk_root() -> Path:
    return Path(gcloud()).resolve().parent.parent


def emulators_available() -> str | None:
    """None when both emulators can start here, else why not."""
    try:
        root = _sdk_root()
    except EmulatorsMissing as err:
        return str(err)
    missing = [
        component
        for component, probe in (
            ("cloud-firestore-emulator", root / "platform" / "cloud-firestore-emulator"),
            ("pubsub-emulator", root / "platform" / "pubsub-emulator"),
        )
        if not probe.exists()
    ]
    if missing:
        return f"gcloud components missing: {', '.join(missing)}"
    if shutil.which("java") is None:
        return "java is not on PATH (the emulators need it)"
    return None


class Emulator:
    """One emulator on a free loopback port; ``host`` is what the *_EMULATOR_HOST
    variables take."""

    def __init__(self, name: str, command: list[str], port: int, log_path: Path) -> None:
        self.name = name
        self.port = port
        self.host = f"127.0.0.1:{port}"
        self.process = ManagedProcess(name, command, log_path)
        self.frozen = False

    def wait_ready(self, timeout_s: float = 60.0) -> float:
        return self.process.wait_ready(lambda: http_ok(f"http://{self.host}/"), timeout_s)

    def freeze(self) -> None:
        """SIGSTOP the emulator's process group (gcloud's wrapper and its java):
        connections still open, and nothing is answered, as from a backend
        that stalls. ``thaw`` ends it."""
        os.killpg(self.process.pid, signal.SIGSTOP)
        self.frozen = True
        # Every process of the group stopped, not merely signalled.
        deadline = time.monotonic() + 5.0
        while not _group_stopped(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.01)

    def thaw(self) -> None:
        os.killpg(self.process.pid, signal.SIGCONT)
        self.frozen = False

    def stop(self) -> None:
        if self.frozen:
            self.thaw()  # a stopped process would not act on SIGTERM
        self.process.stop()


def _group_stopped(pgid: int) -> bool:
    """Whether every process in group ``pgid`` is stopped (state T in /proc)."""
    states = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:  # after the name: state, ppid, pgrp
            states.append(fields[0])
    return all(state in ("T", "t") for state in states)


def start_firestore(
    log_dir: Path, port: int | None = None, import_data: Path | None = None
) -> Emulator:
    """The Firestore emulator; ``import_data``: an ``export_firestore`` file to start from."""
    port = port or free_port()
    command = [gcloud(), "emulators", "firestore", "start", f"--host-port=127.0.0.1:{port}"]
    if import_data is not None:
        command.append(f"--import-data={import_data}")
    return Emulator("firestore-emulator", command, port, log_dir / "firestore-emulator.log")


def export_firestore(emulator: Emulator, project: str, directory: Path) -> Path:
    """Write ``project``'s documents under ``directory`` through the emulator's
    own export route; the metadata file ``start_firestore(import_data=...)``
    takes. (``--export-on-exit`` writes nothing when the group is stopped by
    a signal, as ``stop`` does.)"""
    directory.mkdir(parents=True, exist_ok=True)
    before = set(directory.glob("*/*.overall_export_metadata"))
    body = {
        "database": f"projects/{project}/databases/(default)",
        "export_directory": str(directory),
    }
    request = urllib.request.Request(
        f"http://{emulator.host}/emulator/v1/projects/{project}:export",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60):
        pass
    [written] = set(directory.glob("*/*.overall_export_metadata")) - before
    return written


def start_pubsub(log_dir: Path, project: str, port: int | None = None) -> Emulator:
    port = port or free_port()
    command = [
        gcloud(),
        "beta",
        "emulators",
        "pubsub",
        "start",
        f"--host-port=127.0.0.1:{port}",
        f"--project={project}",
    ]
    return Emulator("pubsub-emulator", command, port, log_dir / "pubsub-emulator.log")
