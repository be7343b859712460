"""``spotline up``: the whole system on one machine, with nothing imitated
that can run here.

1. the Firestore and Pub/Sub emulators (gcloud) and a Cloud Storage emulator
   holding the ``gs://`` storage root, on free ports;
2. the local cloud (``spotline.infra.localcloud``): Compute Engine's REST API on
   loopback, whose "VMs" are processes running the real agent, each with its
   own metadata server; the functions reach it through ``GceCompute``;
3. one functions-framework server per function in the topology;
4. the topology applied to the Pub/Sub emulator, with push subscriptions;
5. a tick loop publishing to the reaper's topic, standing in for Scheduler.

Everything is stopped in reverse order, each process by its process group.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import site
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from spotline.infra.localcloud.chaos_client import ChaosClient
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import Launcher, ProcessLauncher, RecordLauncher
from spotline.infra.localstack.chaos import RandomPreemptions
from spotline.infra.localstack.emulators import Emulator, start_firestore, start_pubsub
from spotline.infra.localstack.processes import ManagedProcess, free_port, http_ok
from spotline.infra.localstack.pubsub import apply_topology
from spotline.infra.localstack.storage import StorageEmulator, reload_fsspec_config
from spotline.infra.topology import FUNCTIONS, REAPER_SCHEDULE
from spotline.shared import logs
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.pubsub_bus import PubsubBus
from spotline.shared.contract.events import ReaperTick
from spotline.shared.domain.catalog import load_catalog

STACK_FILE = "stack.json"


@dataclass
class StackOptions:
    project: str = "spotline-local"
    tick_s: float = 10.0  # Cloud Scheduler ticks every minute; locally faster
    heartbeat_s: float = 5.0
    region: str = "us-central1"
    zones: tuple[str, ...] = ("us-central1-a", "us-central1-b")
    capacity_errors: dict[str, str] = field(default_factory=dict)
    # Regional quota limits by metric, over the local cloud's defaults (`up --quota`).
    quota_limits: dict[str, float] = field(default_factory=dict)
    # The reaper's limits (production: 300 s, 600 s, 120 s); locally shorter.
    stall_timeout_s: float = 60.0
    boot_timeout_s: float = 120.0
    request_timeout_s: float = 30.0
    # Chaos: random Spot preemptions per VM-hour (0: none), replayable by seed.
    preempt_rate_per_vm_hour: float = 0.0
    chaos_seed: int | None = None
    notice_s: float = 30.0
    # How long a VM being deleted or preempted stays in each teardown state
    # (TERMINATED, DEPROVISIONING) once its process has ended; Compute Engine
    # takes tens of seconds, locally shorter.
    teardown_s: float = 2.0
    # The per-user mode (SECURITY.md): these users submit and cancel on their own topics.
    user_topics: tuple[str, ...] = ()
    # Job webhooks may call receivers on this machine, over plain http too
    # (the webhook_allowed_networks setting; in the cloud: none, https only).
    webhook_allowed_networks: tuple[str, ...] = ("127.0.0.0/8",)
    # VMs as records (``RecordLauncher``): the local cloud makes them, nothing
    # boots on them. For measuring the control plane alone (a 500-job burst
    # would otherwise start 100 agents on the machine being measured).
    record_vms: bool = False
    # Instances (processes) per function, by entry point (default 1): Cloud
    # Functions scales a burst out to many; functions-framework's gunicorn
    # starts this many worker processes (its WORKERS variable), each threaded.
    function_processes: dict[str, int] = field(default_factory=dict)


class LocalStack:
    def __init__(self, workdir: Path, options: StackOptions | None = None) -> None:
        self.workdir = workdir.resolve()
        self.options = options or StackOptions()
        self.firestore: Emulator | None = None
        self.pubsub: Emulator | None = None
        self.storage: StorageEmulator | None = None
        self.cloud: LocalCloud | None = None
        self.chaos: RandomPreemptions | None = None
        self.functions: dict[str, ManagedProcess] = {}
        self.endpoints: dict[str, str] = {}
        self.timings: dict[str, float] = {}
        self._stop_ticks = threading.Event()
        self._ticker: threading.Thread | None = None
        self._saved_env: dict[str, str | None] = {}
        self.ticks_sent = 0  # the reaper's ticks published so far

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> LocalStack:
        started = time.monotonic()
        logs_dir = self.workdir / "logs"
        try:
            self.firestore = start_firestore(logs_dir)
            self.pubsub = start_pubsub(logs_dir, self.options.project)
            self.storage = StorageEmulator(
                self.workdir / "storage", logs_dir / "storage-emulator.log"
            )
            with ThreadPoolExecutor(3) as pool:
                waits = [
                    pool.submit(e.wait_ready) for e in (self.firestore, self.pubsub, self.storage)
                ]
                for wait in waits:
                    wait.result()
            self.timings["emulators_s"] = time.monotonic() - started
            self.cloud = LocalCloud(
                self.options.project,
                self._launcher(),
                zones={self.options.region: self.options.zones},
                capacity_errors=self.options.capacity_errors or None,
                quota_limits=self.options.quota_limits,
                teardown_s=self.options.teardown_s,
            ).start()
            self.chaos = RandomPreemptions(
                self.cloud.model.running_spot_vms,
                ChaosClient(self.cloud.endpoint, self.options.project),
                self.options.preempt_rate_per_vm_hour,
                self.options.chaos_seed,
                self.options.notice_s,
            ).start()
            self._start_functions(logs_dir)
            # The Google clients in this process (topology, ticks) find the
            # emulators through these variables; close() (or restore_env())
            # puts them back.
            self._saved_env = _point_at(self.client_env())
            apply_topology(self.options.project, self.endpoints, self.options.user_topics)
            FirestoreStore(self.options.project).seed_machines(load_catalog())
            # The ticks' client is made now, while the variables name the
            # emulator: it keeps that address after restore_env().
            tick_bus = PubsubBus(self.options.project)
            _ = tick_bus.publisher
            self._ticker = threading.Thread(target=self._tick, args=(tick_bus,), daemon=True)
            self._ticker.start()
        except BaseException:
            self.close()
            raise
        self.timings["ready_s"] = time.monotonic() - started
        self._write_stack_file()
        return self

    def close(self) -> None:
        self._stop_ticks.set()
        if self.chaos is not None:
            self.chaos.stop()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        if self.cloud is not None:
            self.cloud.close()
        for server in self.functions.values():
            server.stop()
        for emulator in (self.storage, self.pubsub, self.firestore):
            if emulator is not None:
                emulator.stop()
        (self.workdir / STACK_FILE).unlink(missing_ok=True)
        self.restore_env()

    # -- this process's environment ---------------------------------------------

    def restore_env(self) -> None:
        """Put back the variables ``start`` set in this process, while the
        stack runs on: for a stack shared by many tests (the test session's),
        which must not point every later test at itself. Idempotent."""
        saved, self._saved_env = self._saved_env, {}
        _put_back(saved)

    @contextlib.contextmanager
    def environment(self) -> Iterator[LocalStack]:
        """This process pointed at the stack (``client_env`` in ``os.environ``,
        fsspec's gs:// defaults) for the block only; as it was afterwards."""
        saved = _point_at(self.client_env())
        try:
            yield self
        finally:
            _put_back(saved)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- environments -----------------------------------------------------------

    def client_env(self) -> dict[str, str]:
        """What a client (CLI, test) needs to talk to this stack."""
        assert self.firestore and self.pubsub and self.storage and self.cloud
        return {
            "FIRESTORE_EMULATOR_HOST": self.firestore.host,
            "PUBSUB_EMULATOR_HOST": self.pubsub.host,
            "SPOTLINE_PROJECT": self.options.project,
            "GOOGLE_CLOUD_PROJECT": self.options.project,
            "SPOTLINE_COMPUTE_ENDPOINT": self.cloud.endpoint,
            "SPOTLINE_STORAGE_ROOT": self.storage.root,
            **self.storage.client_env(),
            "SPOTLINE_REGION": self.options.region,
            "SPOTLINE_ZONES": ",".join(self.options.zones),
            "SPOTLINE_HEARTBEAT_S": str(self.options.heartbeat_s),
            "SPOTLINE_STALL_TIMEOUT_S": str(self.options.stall_timeout_s),
            "SPOTLINE_BOOT_TIMEOUT_S": str(self.options.boot_timeout_s),
            "SPOTLINE_REQUEST_TIMEOUT_S": str(self.options.request_timeout_s),
            "SPOTLINE_WEBHOOK_ALLOWED_NETWORKS": ",".join(self.options.webhook_allowed_networks),
            **(
                {"SPOTLINE_USER_TOPICS": ",".join(self.options.user_topics)}
                if self.options.user_topics
                else {}
            ),
        }

    def _vm_env(self) -> dict[str, str]:
        # A VM only publishes events and touches storage: no Firestore here.
        assert self.pubsub and self.storage
        return {
            "PUBSUB_EMULATOR_HOST": self.pubsub.host,
            **self.storage.client_env(),
            **_source_path(),
            "PYTHONUNBUFFERED": "1",
            # Local VMs are processes of this machine: their trainers run as the
            # stack's user, even where that is root (no spotline-trainer here).
            "SPOTLINE_TRAINER_USER": os.environ.get("SPOTLINE_TRAINER_USER", ""),
        }

    def _launcher(self) -> Launcher:
        if self.options.record_vms:
            return RecordLauncher()
        agent = [sys.executable, "-m", "spotline.vm_image.agent"]
        return ProcessLauncher(self.workdir, agent, env=self._vm_env())

    def _start_functions(self, logs_dir: Path) -> None:
        base_env = {**os.environ, **self.client_env(), "PYTHONUNBUFFERED": "1"}
        for function in FUNCTIONS:
            processes = self.options.function_processes.get(function.entry_point)
            env = base_env if processes is None else {**base_env, "WORKERS": str(processes)}
            port = free_port()
            command = [
                sys.executable, "-m", "functions_framework",
                "--target", function.entry_point,
                "--source", str(resources.files("spotline.functions").joinpath("main.py")),
                "--signature-type", "cloudevent",
                "--host", "127.0.0.1", "--port", str(port),
            ]  # fmt: skip
            self.functions[function.entry_point] = ManagedProcess(
                f"function {function.entry_point}",
                command,
                logs_dir / f"{function.entry_point}.log",
                env=env,
                # Not the caller's folder: `python -m` puts the cwd first on
                # sys.path, where a user's own package could shadow one of ours.
                cwd=self.workdir,
            )
            self.endpoints[function.entry_point] = f"http://127.0.0.1:{port}"
        for name, server in self.functions.items():
            server.wait_ready(functools.partial(http_ok, self.endpoints[name]), timeout_s=60)

    def _tick(self, bus: PubsubBus) -> None:
        while not self._stop_ticks.wait(self.options.tick_s):
            try:
                bus.publish(REAPER_SCHEDULE.topic, ReaperTick(sent_at=datetime.now(UTC)))
                self.ticks_sent += 1
            except Exception as err:  # the next tick will do
                logs.warning(f"tick failed: {err}")

    def _write_stack_file(self) -> None:
        stack = {"env": self.client_env(), "workdir": str(self.workdir), "pid": os.getpid()}
        (self.workdir / STACK_FILE).write_text(json.dumps(stack, indent=2))


def _source_path() -> dict[str, str]:
    """PYTHONPATH for the VMs where spotline is not installed in site-packages
    (a clone's editable install): a job's own venv reaches the agent's
    site-packages through a .pth file (``spotline.vm_image.agent.job_env``),
    which does not run the editable install's import hook."""
    root = Path(str(resources.files("spotline"))).resolve().parent
    sites = {Path(path).resolve() for path in [*site.getsitepackages(), site.getusersitepackages()]}
    return {} if root in sites else {"PYTHONPATH": str(root)}


def _point_at(env: dict[str, str]) -> dict[str, str | None]:
    """Set ``env`` in this process; what the variables were before."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    reload_fsspec_config()
    return saved


def _put_back(saved: dict[str, str | None]) -> None:
    """Undo ``_point_at``: each variable as it was (unset where it was unset)."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if saved:
        reload_fsspec_config()


def read_stack_workdir(workdir: Path) -> Path:
    """Where the running stack keeps its files (the demo uses a folder below)."""
    path = workdir / STACK_FILE
    if not path.exists():
        return workdir
    return Path(json.loads(path.read_text())["workdir"])


def read_stack_env(workdir: Path) -> dict[str, str] | None:
    """The client environment of a running ``spotline up`` in ``workdir``."""
    path = workdir / STACK_FILE
    if not path.exists():
        return None
    return dict(json.loads(path.read_text())["env"])
