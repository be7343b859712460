"""spotline from its wheel, outside any clone: ``spotline demo``, ``up`` and
``deploy --dry-run`` from a fresh virtual environment, as ``pipx install``
makes one.

Every command runs in a folder of the user's own that holds ``shared/``,
``infra/`` and ``functions/`` packages, each raising if imported: none of them
may stand in for spotline's. The venv is made once for the module (pip's
cache makes the install about a minute; torch is pinned as the Makefile pins
it, since a looser requirement downloads GBs).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from spotline.infra.deploy.source import build_archive
from spotline.infra.endpoints import Endpoints
from spotline.infra.localstack.emulators import Emulator, emulators_available
from tests.cloud_double import CloudDouble
from tests.wheels import build_wheel

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]
# The demo's trainer (torch, scikit-learn) and the Cloud Storage emulator.
EXTRAS = "torch,local"
USERS_PACKAGES = ("shared", "infra", "functions")
REGION = "us-central1"
# What the commands must not inherit from this process: a venv, a path into the
# clone, or a stack or project another test pointed this process at.
_NOT_INHERITED = re.compile(
    r"(VIRTUAL_ENV|PYTHONPATH|GOOGLE_CLOUD_PROJECT|.*_EMULATOR_HOST|SPOTLINE_(?!CONFIG$|TRAINER_USER$).*)"
)


def as_from_a_terminal() -> None:
    """Ctrl-C's SIGINT reaches the command, as from a terminal: a runner that
    starts the tests in the background (a CI's shell) has them ignore it, and
    the command would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass(frozen=True)
class Installed:
    """spotline installed from its wheel in ``venv``; ``folder`` is the user's."""

    venv: Path
    folder: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not _NOT_INHERITED.fullmatch(k)}
        # As pipx puts the command on PATH; gcloud's emulators are found there too.
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', os.defpath)}"
        return {**env, **extra}

    def run(
        self, *args: str, timeout_s: float, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / "spotline"), *args]
        process = subprocess.Popen(
            command,
            cwd=self.folder,
            env=env or self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=as_from_a_terminal,
        )
        try:
            out, err = process.communicate(timeout=timeout_s)
        except BaseException:
            # Ctrl-C first: `demo` and `up` then stop the servers they started,
            # each in a process group of its own, which a kill would orphan.
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
            raise
        return subprocess.CompletedProcess(command, process.returncode, out, err)


def users_folder(folder: Path) -> Path:
    """A project of the user's own, with packages named like spotline's folders."""
    for name in USERS_PACKAGES:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(
            f"raise ImportError('the user\\'s own {name}/ was imported instead of spotline')\n"
        )
    return folder


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    missing = emulators_available()
    if missing:
        print(f"\n!!! SKIPPING THE INSTALLED-WHEEL TESTS: {missing} !!!", file=sys.stderr)
        pytest.skip(f"emulators unavailable: {missing}")
    repo_root = Path(__file__).resolve().parents[2]
    root = tmp_path_factory.mktemp("installed")
    wheel = build_wheel(repo_root, root / "dist")
    venv = root / "venv"
    # The base interpreter's venv module: a venv nothing of this one's leaks into.
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = ["install", "--disable-pip-version-check", "--quiet", f"{wheel}[{EXTRAS}]"]
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", *install],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return Installed(venv, users_folder(root / "project"))


def test_spotline_demo_runs_the_digits_job_to_completion(installed: Installed) -> None:
    demo = installed.run("demo", timeout_s=400)

    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert re.search(r"demo finished in [\d.]+ s: COMPLETED", demo.stdout)
    assert "VM processes left: 0" in demo.stdout
    assert (installed.folder / ".spotline" / "demo" / "logs").is_dir()


def test_spotline_up_serves_until_interrupted_and_stops_everything(
    installed: Installed,
) -> None:
    out = installed.folder / "up.out"
    env = installed.env()
    with out.open("w") as sink:
        up = subprocess.Popen(
            [str(installed.bin / "spotline"), "up"],
            cwd=installed.folder,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=as_from_a_terminal,
        )
    try:
        text = _wait_for(out, "Ctrl-C to stop.", up, timeout_s=120)
        exports = dict(re.findall(r"^export (\w+)=(\S+)$", text, re.MULTILINE))
        status = installed.run("status", timeout_s=60, env=env)
        assert status.returncode == 0 and "no jobs" in status.stdout, status.stderr
        up.send_signal(signal.SIGINT)  # what Ctrl-C sends
        assert up.wait(timeout=60) == 0, out.read_text()[-3000:]
    finally:
        _stop(up)

    assert not (installed.folder / ".spotline" / "stack.json").exists()
    servers = [
        exports["FIRESTORE_EMULATOR_HOST"],
        exports["PUBSUB_EMULATOR_HOST"],
        exports["SPOTLINE_COMPUTE_ENDPOINT"].removeprefix("http://"),
        exports["STORAGE_EMULATOR_HOST"].removeprefix("http://"),
    ]
    assert [host for host in servers if _listening(host)] == []


@pytest.fixture
def cloud(project: str, emulators: tuple[Emulator, Emulator]) -> Iterator[CloudDouble]:
    with CloudDouble(project, REGION, pubsub_host=emulators[1].host) as double:
        yield double


def test_spotline_deploy_dry_run_reads_the_project_and_ships_the_same_source(
    installed: Installed, cloud: CloudDouble, project: str
) -> None:
    # The deploy tests' double for every Google API deploy calls; Pub/Sub and
    # Firestore are the emulators the `project` fixture points at.
    endpoints = {
        f"SPOTLINE_{api.name.upper()}_ENDPOINT": cloud.endpoint for api in fields(Endpoints)
    }
    env = {**os.environ, "PATH": installed.env()["PATH"], **endpoints}
    env.pop("PYTHONPATH", None)
    args = ["--project", project, "--region", REGION, "--storage-root", "gs://acme-spotline/runs"]

    dry_run = installed.run("deploy", *args, "--dry-run", timeout_s=120, env=env)

    assert dry_run.returncode == 0, dry_run.stdout[-3000:] + dry_run.stderr[-3000:]
    assert cloud.requests and cloud.writes() == []  # it read the project, changed nothing
    archive = build_archive()
    assert f"source:        {len(archive.files)} files" in dry_run.stdout
    # Byte for byte the clone's archive, pins aside (the two venvs may differ).
    probe = (
        "from spotline.infra.deploy.source import build_archive as b; print(b(pin=False).digest)"
    )
    from_wheel = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", probe],
        cwd=installed.folder,
        env=installed.env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert from_wheel.stdout.strip() == build_archive(pin=False).digest


def _stop(up: subprocess.Popen[bytes]) -> None:
    """Stop ``spotline up`` if the test did not: Ctrl-C first, so that it stops
    its servers (each in a process group of its own, which a kill of its
    group would leave running), then a kill."""
    if up.poll() is not None:
        return
    up.send_signal(signal.SIGINT)
    try:
        up.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()


def _wait_for(path: Path, line: str, process: subprocess.Popen[bytes], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text()
        if line in text:
            return text
        assert process.poll() is None, f"it exited {process.returncode}:\n{text[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {line!r} within {timeout_s} s:\n{path.read_text()[-3000:]}")


def _listening(host: str) -> bool:
    address, port = host.rsplit(":", 1)
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((address, int(port))) == 0
