"""VmHost: a local Compute Engine whose VMs are processes running the VM agent.

Each VM is ``agent_command`` started in its own process group, with its own
metadata server (``infra.localcloud.metadata_server``) named in ``GCE_METADATA_HOST``, and
its output in ``WORKDIR/vms/NAME.log``. A VM is RUNNING while its process lives
and TERMINATED once it exits on its own (a VM that shut itself down). Spot
preemption is mimicked as Compute Engine does it: ``instance/preempted`` turns
TRUE, the process group gets SIGTERM at once and SIGKILL when the notice ends,
and the VM is deleted (``instanceTerminationAction: DELETE``). A stopped VM
(an on-demand VM kept for later) stays listed TERMINATED with its metadata and
its instance id, and ``boot`` runs its agent again.

The same operations are served as JSON on 127.0.0.1 for ``LocalCompute``::

    POST   /vms                      VmRequest fields -> vm
    POST   /gangs                    {"nodes": [VmRequest fields], "zones": [...]} -> {"items"}
    GET    /vms?label=k=v[&label=..] -> {"items": [vm, ...]}
    GET    /vms/NAME[?zone=Z]        -> vm
    DELETE /vms/NAME[?zone=Z]        -> {}
    POST   /vms/NAME/metadata        {"items": {k: v}} -> vm
    POST   /vms/NAME/preempt         {"notice_s": 30.0} -> vm
    POST   /vms/NAME/kill            -> {}
    POST   /vms/NAME/stop            -> vm  (SIGTERM, as a shutdown; kept TERMINATED)
    POST   /vms/NAME/start           -> vm  (a stopped VM boots again, same metadata)
    POST   /vms/NAME/freeze          -> vm  (SIGSTOP: a hung VM)
    GET    /regions/REGION/quotas    -> {"items": [{"metric", "limit", "usage"}, ...]}

Errors answer a Compute Engine error body,
``{"error": {"code", "message", "errors": [{"reason", "message", "domain"}]}}``:
404 ``notFound``, 409 ``alreadyExists`` / ``resourceNotReady``, 400 ``invalid``,
503 ``ZONE_RESOURCE_POOL_EXHAUSTED`` (and 403 ``QUOTA_EXCEEDED``) for capacity.
An insert, gang insert or start that would take a regional quota past its limit
(``infra.localcloud.vm_host_quotas``) is refused 403 ``QUOTA_EXCEEDED`` too.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.localcloud.metadata_server import POLL_S, Identity, MetadataServer
from infra.localcloud.vm_host_api import (
    ControlHandler,
    ControlServer,
    HostError,
    not_found,
    str_map,
)
from infra.localcloud.vm_host_quotas import (
    DEFAULT_LIMITS,
    Charge,
    check_quota,
    quota_listing,
    vm_charge,
)
from shared.domain.vms import VmState

log = logging.getLogger(__name__)

# Compute Engine's rule for instance names; it also keeps a name safe as a file name.
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_REQUIRED = ("name", "zone", "machine_type")
# How long SIGKILL may take to end a process group before we stop waiting.
KILL_WAIT_S = 5.0

# Capacity rules: a zone, or a (machine_type, zone) pair -> the reason to answer.
# The key is Any because Mapping is invariant in it: a caller's dict[str, str]
# would not pass as Mapping[str | tuple[str, str], str].
CapacityErrors = Mapping[Any, str]


@dataclass
class _Vm:
    name: str
    zone: str
    machine_type: str
    provisioning: str
    image: str
    labels: dict[str, str]
    metadata: MetadataServer
    process: subprocess.Popen[bytes]
    log_path: Path
    charge: Charge  # what it takes of the region's quotas while it is not TERMINATED
    state: VmState = VmState.RUNNING
    removing: bool = False  # being deleted, preempted or killed: forget it once dead
    exit_code: int | None = None
    exited: threading.Event = field(default_factory=threading.Event)
    # Held while signalling and while reaping, so that no signal reaches a process
    # group whose id the kernel may have handed to someone else.
    signal_lock: threading.Lock = field(default_factory=threading.Lock)
    reaped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "zone": self.zone,
            "machine_type": self.machine_type,
            "provisioning": self.provisioning,
            "image": self.image,
            "state": self.state.value,
            "labels": dict(self.labels),
            "metadata": self.metadata.attributes,
            "preempted": self.metadata.preempted,
            "id": self.metadata.identity.id,
            "metadata_host": self.metadata.host,
            "pid": self.process.pid,
            "exit_code": self.exit_code,
            "log": str(self.log_path),
        }

    def signal(self, sig: signal.Signals) -> None:
        with self.signal_lock:
            if self.reaped:
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)


class VmHost:
    """Owns local VM processes and serves them over a control HTTP API.

    Args:
        workdir: where VM logs go (``workdir/vms/NAME.log``); also the VMs' cwd.
        project: the project id the metadata servers report.
        agent_command: the command every VM runs.
        env: added to ``os.environ`` for every VM.
        capacity_errors: inserts to refuse, keyed by zone or (machine_type, zone),
            valued by the reason to answer (e.g. ``ZONE_RESOURCE_POOL_EXHAUSTED``).
        quota_limits: regional quota limits by metric (e.g. ``NVIDIA_T4_GPUS``),
            over ``infra.localcloud.vm_host_quotas.DEFAULT_LIMITS``.
        stop_grace_s: SIGTERM to SIGKILL delay for ``delete`` and ``close``.
    """

    def __init__(
        self,
        workdir: Path,
        project: str,
        agent_command: list[str],
        env: dict[str, str] | None = None,
        capacity_errors: CapacityErrors | None = None,
        stop_grace_s: float = 3.0,
        quota_limits: Mapping[str, float] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.project = project
        self.agent_command = list(agent_command)
        self.env = dict(env or {})
        self.capacity_errors: dict[str | tuple[str, str], str] = {**(capacity_errors or {})}
        self.quota_limits: dict[str, float] = {**DEFAULT_LIMITS, **(quota_limits or {})}
        self.stop_grace_s = stop_grace_s
        self.numeric_project_id = str(int(hashlib.sha256(project.encode()).hexdigest(), 16))[:12]
        self._vms: dict[str, _Vm] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._server: ControlServer | None = None

    def start(self) -> None:
        """Serve the control API on 127.0.0.1 (a free port) from a daemon thread."""
        (self.workdir / "vms").mkdir(parents=True, exist_ok=True)
        server = ControlServer(("127.0.0.1", 0), ControlHandler)
        server.vm_host = self
        self._server = server
        threading.Thread(
            target=server.serve_forever, args=(POLL_S,), name="vm-host", daemon=True
        ).start()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("VmHost not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        """Stop every VM (SIGTERM, SIGKILL after the grace) and the control server."""
        with self._lock:
            self._closed = True
            vms = list(self._vms.values())
            for vm in vms:
                vm.removing = True
        self._stop(vms)
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def insert(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Create a VM from VmRequest fields; an existing name answers that VM.

        Raises:
            HostError: 400 for a bad request, 409 when the name lives in another
                zone, 503/403 for a configured capacity error or a quota limit.
        """
        return self._insert_all([request])[0]

    def insert_gang(self, nodes: Sequence[Mapping[str, Any]], zones: Sequence[str]) -> Any:
        """Create every node in the first of ``zones`` with capacity for them
        all (all or nothing, as a bulk insert with minCount = count); nodes
        that exist already are answered as they are."""
        if not nodes or not zones:
            raise HostError(400, "invalid", "A gang needs nodes and zones.")
        existing = self.get(str(nodes[0].get("name")))
        if existing is not None:
            zone = existing["zone"]
        else:
            machine_type = str(nodes[0].get("machine_type"))
            for zone in zones:
                try:
                    self._check_capacity(machine_type, zone)
                    break
                except HostError:
                    continue
            else:
                raise HostError(
                    503, "ZONE_RESOURCE_POOL_EXHAUSTED",
                    f"No zone of {list(zones)} holds {len(nodes)} x {machine_type}.",
                )  # fmt: skip
        return self._insert_all([{**node, "zone": zone} for node in nodes])

    def _insert_all(self, requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Create the VMs that do not exist yet, all of them or none, under one
        hold of the lock (so no other insert takes the quota between them)."""
        for request in requests:
            name, zone, machine_type = (str(request.get(k) or "") for k in _REQUIRED)
            if not (NAME_RE.match(name) and zone and machine_type):
                raise HostError(
                    400, "invalid", f"Invalid name/zone/machine_type: {name!r} {zone!r}"
                )
        launched: list[_Vm] = []
        try:
            with self._lock:
                if self._closed:
                    raise HostError(503, "backendError", "The VM host is shutting down.")
                new = []
                for request in requests:
                    existing = self._vms.get(str(request["name"]))
                    if existing is None:
                        self._check_capacity(str(request["machine_type"]), str(request["zone"]))
                        new.append((request, vm_charge(request)))
                    elif existing.zone != request["zone"]:
                        raise HostError(
                            409, "alreadyExists", f"VM {existing.name} exists in {existing.zone}."
                        )
                check_quota(self.quota_limits, self._live_charges(), [c for _, c in new])
                for request, charge in new:
                    launched.append(self._launch(request, charge))
                    self._vms[launched[-1].name] = launched[-1]
                return [self._vms[str(request["name"])].to_dict() for request in requests]
        finally:
            # Even when a later launch failed, the VMs that started are reaped.
            for vm in launched:
                threading.Thread(
                    target=self._reap, args=(vm,), name=f"reap-{vm.name}", daemon=True
                ).start()

    def get(self, name: str, zone: str | None = None) -> dict[str, Any] | None:
        """The VM, or None when it does not exist (in ``zone``, when given)."""
        with self._lock:
            vm = self._find(name, zone)
            return None if vm is None else vm.to_dict()

    def list(self, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Every VM that carries all the given labels."""
        wanted = dict(labels or {}).items()
        with self._lock:
            return [vm.to_dict() for vm in self._vms.values() if wanted <= vm.labels.items()]

    def delete(self, name: str, zone: str | None = None) -> bool:
        """Stop the VM's process group and forget it; False when it did not exist."""
        with self._lock:
            vm = self._find(name, zone)
            if vm is None:
                return False
            vm.removing = True
            if vm.state == VmState.TERMINATED:  # already reaped: nothing to stop
                del self._vms[name]
                return True
            vm.state = VmState.STOPPING
        self._stop([vm])
        return True

    def set_metadata(
        self, name: str, items: Mapping[str, str], zone: str | None = None
    ) -> dict[str, Any]:
        """Replace the VM's custom metadata, waking its watchers."""
        with self._lock:
            vm = self._get_or_404(name, zone)
            vm.metadata.set_attributes({str(k): str(v) for k, v in items.items()})
            return vm.to_dict()

    def preempt(self, name: str, notice_s: float = 30.0, zone: str | None = None) -> dict[str, Any]:
        """Preempt a Spot VM: flag it, SIGTERM now, SIGKILL after ``notice_s``, delete.

        Returns at once, with the VM STOPPING.
        """
        with self._lock:
            vm = self._begin_removal(name, zone)
            vm.metadata.set_preempted()
            answer = vm.to_dict()
        vm.signal(signal.SIGTERM)
        threading.Thread(
            target=self._end_notice, args=(vm, notice_s), name=f"notice-{name}", daemon=True
        ).start()
        return answer

    def kill(self, name: str, zone: str | None = None) -> None:
        """SIGKILL the VM with no notice (a preemption the agent never saw); it is gone."""
        with self._lock:
            vm = self._begin_removal(name, zone)
        vm.signal(signal.SIGKILL)
        vm.exited.wait(KILL_WAIT_S)

    def freeze(self, name: str, zone: str | None = None) -> dict[str, Any]:
        """SIGSTOP the VM's processes: a hung VM that stays RUNNING but sends no
        heartbeat, until the reaper deletes it (SIGKILL ends stopped processes)."""
        with self._lock:
            vm = self._get_or_404(name, zone)
            answer = vm.to_dict()
        vm.signal(signal.SIGSTOP)
        return answer

    def shut_down(self, name: str, zone: str | None = None) -> dict[str, Any]:
        """Shut the VM down as Compute Engine stops one: SIGTERM (the ACPI
        shutdown), SIGKILL after the grace; it stays, TERMINATED. Returns once
        it is down; stopping a stopped VM answers it as it is."""
        with self._lock:
            vm = self._get_or_404(name, zone)
            if vm.removing:
                raise HostError(409, "resourceNotReady", f"VM {name} is being deleted.")
            if vm.state == VmState.RUNNING:
                vm.state = VmState.STOPPING
        self._stop([vm])
        with self._lock:
            return vm.to_dict()

    def boot(self, name: str, zone: str | None = None) -> dict[str, Any]:
        """Boot a stopped VM: the same name, instance id and metadata, a new
        agent process. Starting a running VM answers it as it is."""
        with self._lock:
            vm = self._get_or_404(name, zone)
            if vm.state == VmState.RUNNING:
                return vm.to_dict()
            if vm.state != VmState.TERMINATED or vm.removing:
                raise HostError(409, "resourceNotReady", f"VM {name} is {vm.state.value}.")
            self._check_capacity(vm.machine_type, vm.zone)
            check_quota(self.quota_limits, self._live_charges(), [vm.charge])
            metadata = MetadataServer(vm.metadata.identity, vm.metadata.attributes)
            vm.metadata = metadata
            vm.process = self._spawn(name, metadata)
            vm.state, vm.exit_code, vm.reaped = VmState.RUNNING, None, False
            vm.exited = threading.Event()
            answer = vm.to_dict()
        threading.Thread(target=self._reap, args=(vm,), name=f"reap-{name}", daemon=True).start()
        return answer

    def region_quotas(self) -> Sequence[dict[str, Any]]:
        """Every quota limit, with the usage of the VMs that are not TERMINATED."""
        with self._lock:
            return quota_listing(self.quota_limits, self._live_charges())

    def running_spot_vms(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(
                vm.name
                for vm in self._vms.values()
                if vm.state == VmState.RUNNING and vm.provisioning == "SPOT" and not vm.removing
            )

    def _stop(self, vms: Sequence[_Vm]) -> None:
        for vm in vms:
            vm.signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        for vm in vms:
            if not vm.exited.wait(max(0.0, deadline - time.monotonic())):
                vm.signal(signal.SIGKILL)
        for vm in vms:
            if not vm.exited.wait(KILL_WAIT_S):
                log.warning("VM %s (pid %d) outlived SIGKILL", vm.name, vm.process.pid)

    def _check_capacity(self, machine_type: str, zone: str) -> None:
        reason = self.capacity_errors.get((machine_type, zone)) or self.capacity_errors.get(zone)
        if reason is None:
            return
        code = 403 if reason == "QUOTA_EXCEEDED" else 503  # as Compute Engine answers
        raise HostError(code, reason, f"No {machine_type} available in {zone}: try another zone.")

    def _live_charges(self) -> Sequence[Charge]:
        # A stopped (TERMINATED) VM keeps only its disk, as on Compute Engine.
        return [vm.charge for vm in self._vms.values() if vm.state != VmState.TERMINATED]

    def _launch(self, request: Mapping[str, Any], charge: Charge) -> _Vm:
        name, zone, machine_type = (str(request[k]) for k in _REQUIRED)
        instance_id = str(10**18 + secrets.randbelow(9 * 10**18))  # 19 digits, as on GCE
        identity = Identity(
            name, instance_id, zone, machine_type, self.project, self.numeric_project_id
        )
        labels = str_map(request.get("labels"), "labels")
        metadata = MetadataServer(identity, str_map(request.get("metadata"), "metadata"))
        return _Vm(
            name=name,
            zone=zone,
            machine_type=machine_type,
            provisioning=str(request.get("provisioning", "SPOT")),
            image=str(request.get("image", "")),
            labels=labels,
            metadata=metadata,
            process=self._spawn(name, metadata),
            log_path=self._log_path(name),
            charge=charge,
        )

    def _log_path(self, name: str) -> Path:
        return self.workdir / "vms" / f"{name}.log"

    def _spawn(self, name: str, metadata: MetadataServer) -> subprocess.Popen[bytes]:
        """Serve the VM's metadata and boot its agent, in its own process group."""
        metadata.start()
        env = {**os.environ, **self.env, "GCE_METADATA_HOST": metadata.host}
        try:
            with self._log_path(name).open("ab") as output:
                return subprocess.Popen(
                    self.agent_command,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.workdir,
                    start_new_session=True,
                )
        except OSError as e:
            metadata.close()
            raise HostError(500, "internalError", f"cannot start {name}: {e}") from e

    def _reap(self, vm: _Vm) -> None:
        # This boot's process, metadata server and event: a start after the
        # state turns TERMINATED gives the VM new ones, which are not ours.
        process, metadata, exited = vm.process, vm.metadata, vm.exited
        # Wait without reaping, so the leader's pid (= the group id) stays ours
        # while we SIGKILL whatever it left in its group; then reap it.
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        with vm.signal_lock:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
            vm.reaped = True
        metadata.close()
        with self._lock:
            vm.exit_code = code
            vm.state = VmState.TERMINATED
            if vm.removing and self._vms.get(vm.name) is vm:
                del self._vms[vm.name]
        exited.set()

    def _end_notice(self, vm: _Vm, notice_s: float) -> None:
        if not vm.exited.wait(notice_s):
            vm.signal(signal.SIGKILL)

    def _find(self, name: str, zone: str | None) -> _Vm | None:
        vm = self._vms.get(name)
        return None if vm is None or (zone and vm.zone != zone) else vm

    def _get_or_404(self, name: str, zone: str | None) -> _Vm:
        vm = self._find(name, zone)
        if vm is None:
            raise not_found(name)
        return vm

    def _begin_removal(self, name: str, zone: str | None) -> _Vm:
        vm = self._get_or_404(name, zone)
        if vm.state != VmState.RUNNING:
            raise HostError(409, "resourceNotReady", f"VM {name} is {vm.state.value}.")
        vm.removing = True
        vm.state = VmState.STOPPING
        return vm
