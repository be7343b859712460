"""The local Compute Engine model: one project's VMs in the zones of its regions.

It does what Compute Engine documents, with no HTTP in it (``rest_api`` serves
it): VMs are keyed by zone and name; an insert may be refused by a configured
capacity rule (by zone, or by machine type and zone) or by a regional quota,
and one whose boot image is missing is not found (404, as Compute Engine);
a stopped VM is listed TERMINATED and keeps its id, metadata and disk, and a
start boots it again; a Spot VM's preemption sets ``instance/preempted``, sends
SIGTERM, SIGKILL when the notice ends, and deletes the VM
(``instanceTerminationAction: DELETE``). What a boot is belongs to the
launcher (``launchers``): a process running the agent, or a record.

Every mutating call does its work before it returns; a VM's end (its process
exited) is reported by the launcher and turns it TERMINATED. A VM being removed
then passes through Compute Engine's teardown states, each for ``teardown_s``,
before it is gone: a deleted one STOPPING -> DEPROVISIONING -> gone, a
preempted one STOPPING -> TERMINATED -> DEPROVISIONING -> gone (Compute
Engine's sequence for a Spot VM whose termination action is DELETE).
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import logging
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from spotline.infra.localcloud.errors import (
    AlreadyExists,
    FingerprintMismatch,
    Invalid,
    NotFound,
    NotReady,
    Refused,
)
from spotline.infra.localcloud.instances import Instance, Spec, fingerprint, region_of
from spotline.infra.localcloud.launchers import Launcher
from spotline.infra.localcloud.metadata_server import Identity
from spotline.infra.localcloud.quotas import (
    DEFAULT_LIMITS,
    Charge,
    check_quota,
    quota_listing,
    vm_charge,
)
from spotline.shared.domain.vms import Provisioning, VmState

log = logging.getLogger(__name__)

DEFAULT_ZONES: dict[str, tuple[str, ...]] = {
    "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"),
    "us-east1": ("us-east1-b", "us-east1-c", "us-east1-d"),
    "europe-west4": ("europe-west4-a", "europe-west4-b", "europe-west4-c"),
}
# How long SIGKILL may take to end a process group before we stop waiting.
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class CapacityRule:
    """A refusal of inserts and starts: ``reason`` as Compute Engine names it,
    in the HTTP answer with ``status``, or in the operation's error when None."""

    reason: str = "ZONE_RESOURCE_POOL_EXHAUSTED"
    status: int | None = None
    message: str | None = None


# Capacity rules by zone, or by (machine_type, zone); a plain reason is a rule
# answered in the operation. The key is Any because Mapping is invariant in it.
CapacityErrors = Mapping[Any, "str | CapacityRule"]


class ComputeModel:
    """One project's VMs.

    Args:
        project: the only project it knows.
        launcher: what boots a VM.
        zones: each region's zones; a VM lives in one of them.
        capacity_errors: inserts and starts to refuse (see ``CapacityRule``).
        missing_images: boot images (``sourceImage`` as sent) that do not
            exist; every other image does (the local cloud bakes none).
        quota_limits: quota limits by metric, over ``quotas.DEFAULT_LIMITS``: every
            region's, and the project's ``GPUS_ALL_REGIONS``.
        stop_grace_s: SIGTERM to SIGKILL for a stop, a delete and ``close``.
        teardown_s: how long a VM being removed stays in each teardown state
            once its process has ended (0: gone at once).
        clock: when a VM is created (its ``creationTimestamp``); a test on a
            stepped clock passes its own, so VM times and its handlers' agree.
    """

    def __init__(
        self,
        project: str,
        launcher: Launcher,
        *,
        zones: Mapping[str, Sequence[str]] | None = None,
        capacity_errors: CapacityErrors | None = None,
        missing_images: Iterable[str] = (),
        quota_limits: Mapping[str, float] | None = None,
        stop_grace_s: float = 3.0,
        teardown_s: float = 0.0,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.project = project
        self.clock = clock or (lambda: datetime.now(UTC))
        self.launcher = launcher
        self.zones = {region: tuple(z) for region, z in (zones or DEFAULT_ZONES).items()}
        self.capacity_errors: dict[Any, str | CapacityRule] = {**(capacity_errors or {})}
        self.missing_images: set[str] = set(missing_images)
        self.quota_limits: dict[str, float] = {**DEFAULT_LIMITS, **(quota_limits or {})}
        self.stop_grace_s = stop_grace_s
        self.teardown_s = teardown_s
        self.numeric_project_id = str(int(hashlib.sha256(project.encode()).hexdigest(), 16))[:12]
        self._vms: dict[tuple[str, str], Instance] = {}
        self._lock = threading.Lock()
        self._closed = False

    # -- reads -------------------------------------------------------------------

    def find(self, name: str, zone: str | None = None) -> Instance | None:
        """The VM named ``name`` (in ``zone``, when given), or None."""
        with self._lock:
            return self._find(name, zone)

    def list(self, labels: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        """Every VM that carries all ``labels``, by zone then name."""
        wanted = dict(labels or {}).items()
        with self._lock:
            return [
                vm for _, vm in sorted(self._vms.items()) if wanted <= dict(vm.spec.labels).items()
            ]

    def region_quotas(self, region: str) -> builtins.list[dict[str, Any]]:
        """Every quota limit of ``region``, with its live VMs' usage."""
        with self._lock:
            self._check_region(region)
            return quota_listing(self.quota_limits, self._live_charges(region))

    def project_quotas(self) -> builtins.list[dict[str, Any]]:
        """The project's global quotas (``GPUS_ALL_REGIONS``), with every live VM's usage."""
        with self._lock:
            return quota_listing(self.quota_limits, self._live_charges(None), project=True)

    def running_spot_vms(self) -> builtins.list[tuple[str, str]]:
        """(zone, name) of every running Spot VM: what a preemption may hit."""
        with self._lock:
            return [
                key
                for key, vm in sorted(self._vms.items())
                if vm.status == VmState.RUNNING
                and vm.spec.provisioning == Provisioning.SPOT
                and not vm.removing
            ]

    # -- creation ------------------------------------------------------------------

    def choose_zone(self, machine_type: str, zones: Sequence[str]) -> str:
        """The first of ``zones`` no capacity rule refuses ``machine_type`` in.

        Raises:
            Refused: every zone refuses (the first zone's refusal).
        """
        refusals: builtins.list[Refused] = []
        for zone in zones:
            try:
                self._check_capacity(machine_type, zone)
                return zone
            except Refused as refused:
                refusals.append(refused)
        raise refusals[0] if refusals else NotFound("no zone to choose from")

    def create(self, specs: Sequence[Spec]) -> builtins.list[Instance]:
        """Create and boot every VM of ``specs``, or none of them.

        Raises:
            NotFound: a zone that is not one of the model's, or a missing image.
            AlreadyExists: a VM of that name exists in that zone.
            Refused: a capacity rule refuses one of them.
            QuotaExceeded: together they would pass a regional limit.
        """
        with self._lock:
            if self._closed:
                raise NotReady("The local cloud is shutting down.")
            for spec in specs:
                self._check_region(region_of(spec.zone), spec.zone)
                if spec.image in self.missing_images:
                    raise NotFound(f"The resource '{spec.image}' was not found")
                if (spec.zone, spec.name) in self._vms:
                    raise AlreadyExists(
                        f"The resource 'projects/{self.project}/zones/{spec.zone}"
                        f"/instances/{spec.name}' already exists"
                    )
                self._check_capacity(spec.machine_type, spec.zone)
            charges = [vm_charge(s.machine_type, s.provisioning, s.accelerators) for s in specs]
            regions = [region_of(spec.zone) for spec in specs]
            for region in set(regions):
                new = [c for r, c in zip(regions, charges, strict=True) if r == region]
                elsewhere = [c for r, c in zip(regions, charges, strict=True) if r != region]
                check_quota(
                    region,
                    self.quota_limits,
                    self._live_charges(region),
                    new,
                    everywhere=[*self._live_charges(None), *elsewhere],
                )
            created: builtins.list[Instance] = []
            for spec, charge in zip(specs, charges, strict=True):
                instance_id = str(10**18 + secrets.randbelow(9 * 10**18))
                vm = Instance(
                    spec, instance_id, charge, dict(spec.metadata), created_at=self.clock()
                )
                self._boot(vm)
                self._vms[(spec.zone, spec.name)] = vm
                created.append(vm)
            return created

    # -- changes -------------------------------------------------------------------

    def set_metadata(
        self, name: str, zone: str | None, items: Mapping[str, str], expected: str | None
    ) -> None:
        """Replace the VM's metadata items, waking its metadata watchers.

        Raises:
            NotFound: no such VM.
            FingerprintMismatch: ``expected`` is not the current fingerprint.
        """
        with self._lock:
            vm = self._get(name, zone)
            if expected is not None and expected != fingerprint(vm.metadata):
                raise FingerprintMismatch(
                    "Supplied fingerprint does not match current metadata fingerprint."
                )
            vm.metadata = dict(items)
            if vm.run is not None:
                vm.run.set_attributes(vm.metadata)

    def delete(self, name: str, zone: str | None = None) -> Instance:
        """Stop the VM (SIGTERM, SIGKILL after the grace) and tear it down; the
        VM's ``gone`` is set once it is no longer listed. A VM already being
        removed is left to finish."""
        with self._lock:
            vm = self._get(name, zone)
            if vm.removing:
                return vm
            vm.removing = True
            ended = vm.status == VmState.TERMINATED or vm.run is None
            steps = self._teardown_steps(vm) if ended else []
            if steps:
                vm.status = steps[0]
            elif not ended:
                vm.status = VmState.STOPPING
        if ended:  # nothing to stop
            self._tear_down(vm, steps)
        else:
            self._stop([vm])
        return vm

    def stop(self, name: str, zone: str | None = None) -> None:
        """Shut the VM down as an ACPI shutdown does (SIGTERM, SIGKILL after the
        grace); it stays listed, TERMINATED. A stopped VM stays as it is."""
        with self._lock:
            vm = self._get(name, zone)
            if vm.removing:
                raise NotReady(f"The resource '{vm.name}' is being deleted.")
            if vm.status == VmState.TERMINATED:
                return
            vm.status = VmState.STOPPING
        self._stop([vm])

    def start(self, name: str, zone: str | None = None) -> None:
        """Boot a stopped VM: the same id and metadata, a new boot. Starting a
        running VM does nothing.

        Raises:
            NotReady: the VM is stopping or being deleted.
            Refused, QuotaExceeded: as ``create``.
        """
        with self._lock:
            vm = self._get(name, zone)
            if vm.status == VmState.RUNNING and not vm.removing:
                return
            if vm.status != VmState.TERMINATED or vm.removing:
                raise NotReady(f"The resource '{vm.name}' is {vm.status.value}.")
            self._check_capacity(vm.spec.machine_type, vm.zone)
            region = region_of(vm.zone)
            check_quota(
                region,
                self.quota_limits,
                self._live_charges(region),
                [vm.charge],
                everywhere=self._live_charges(None),
            )
            self._boot(vm)

    # -- what happens to VMs (chaos) -------------------------------------------------

    def preempt(self, name: str, zone: str | None = None, notice_s: float = 30.0) -> Instance:
        """Preempt the VM: ``instance/preempted`` TRUE and SIGTERM now, SIGKILL
        when the notice ends; it is deleted once it ends. Returns at once.

        Raises:
            Invalid: the VM is on demand (Compute Engine preempts Spot VMs only).
        """
        with self._lock:
            if self._get(name, zone).spec.provisioning != Provisioning.SPOT:
                raise Invalid(f"The resource '{name}' is not a Spot VM: it cannot be preempted.")
            vm = self._begin_removal(name, zone)
            vm.preempted = True
            run = vm.run
            if run is not None:
                run.set_preempted()
        if run is not None:
            run.signal(signal.SIGTERM)
            threading.Thread(
                target=self._end_notice, args=(vm, notice_s), name=f"notice-{name}", daemon=True
            ).start()
        return vm

    def kill(self, name: str, zone: str | None = None) -> None:
        """SIGKILL the VM with no notice (a preemption the agent never saw); it is gone."""
        with self._lock:
            vm = self._begin_removal(name, zone)
        if vm.run is not None:
            vm.run.signal(signal.SIGKILL)
            vm.run.exited.wait(KILL_WAIT_S)

    def freeze(self, name: str, zone: str | None = None) -> Instance:
        """SIGSTOP the VM's processes: a hung VM that stays RUNNING and sends no
        heartbeat, until it is deleted (SIGKILL ends stopped processes)."""
        with self._lock:
            vm = self._get(name, zone)
        if vm.run is not None:
            vm.run.signal(signal.SIGSTOP)
        return vm

    def close(self) -> None:
        """Stop every VM (SIGTERM, SIGKILL after the grace); refuse new ones."""
        with self._lock:
            self._closed = True
            vms = list(self._vms.values())
            for vm in vms:
                vm.removing = True
        self._stop(vms)

    # -- inside the lock -------------------------------------------------------------

    def _boot(self, vm: Instance) -> None:
        identity = Identity(
            vm.name, vm.id, vm.zone, vm.spec.machine_type, self.project, self.numeric_project_id
        )
        run = self.launcher.launch(identity, vm.metadata, functools.partial(self._ended, vm))
        vm.run, vm.status, vm.exit_code, vm.preempted = run, VmState.RUNNING, None, False

    def _ended(self, vm: Instance, code: int) -> None:
        # Called by the launcher once per boot; a boot is ended before the next begins.
        with self._lock:
            vm.exit_code = code
            vm.status = VmState.TERMINATED
            if not vm.removing or self._vms.get((vm.zone, vm.name)) is not vm:
                return
            steps = self._teardown_steps(vm)
            if steps:
                vm.status = steps[0]
        self._tear_down(vm, steps)

    def _teardown_steps(self, vm: Instance) -> builtins.list[VmState]:
        """The states a VM whose process has ended passes through before it is
        gone, each for ``teardown_s`` (none when 0 or closing)."""
        if self.teardown_s <= 0 or self._closed:
            return []
        if vm.preempted:
            return [VmState.TERMINATED, VmState.DEPROVISIONING]
        return [VmState.DEPROVISIONING]

    def _tear_down(self, vm: Instance, steps: Sequence[VmState]) -> None:
        """Play ``steps`` (the first already shown) on a thread, then forget the VM."""

        def forget() -> None:
            with self._lock:
                if self._vms.get((vm.zone, vm.name)) is vm:
                    del self._vms[(vm.zone, vm.name)]
            vm.gone.set()

        def play() -> None:
            for state in steps[1:]:
                time.sleep(self.teardown_s)
                with self._lock:
                    vm.status = state
            time.sleep(self.teardown_s)
            forget()

        if steps:
            threading.Thread(target=play, name=f"teardown-{vm.name}", daemon=True).start()
        else:
            forget()

    def _find(self, name: str, zone: str | None) -> Instance | None:
        if zone is not None:
            return self._vms.get((zone, name))
        return next((vm for (_, n), vm in sorted(self._vms.items()) if n == name), None)

    def _get(self, name: str, zone: str | None) -> Instance:
        vm = self._find(name, zone)
        if vm is None:
            where = f"zones/{zone}" if zone else "zones/-"
            raise NotFound(
                f"The resource 'projects/{self.project}/{where}/instances/{name}' was not found"
            )
        return vm

    def _begin_removal(self, name: str, zone: str | None) -> Instance:
        vm = self._get(name, zone)
        if vm.status != VmState.RUNNING or vm.removing:
            raise NotReady(f"The resource '{vm.name}' is {vm.status.value}.")
        vm.removing = True
        vm.status = VmState.STOPPING
        return vm

    def _check_region(self, region: str, zone: str | None = None) -> None:
        if region not in self.zones:
            raise NotFound(f"The resource 'projects/{self.project}/regions/{region}' was not found")
        if zone is not None and zone not in self.zones[region]:
            raise NotFound(f"The resource 'projects/{self.project}/zones/{zone}' was not found")

    def _check_capacity(self, machine_type: str, zone: str) -> None:
        rule = self.capacity_errors.get((machine_type, zone)) or self.capacity_errors.get(zone)
        if rule is None:
            return
        if isinstance(rule, str):
            rule = CapacityRule(rule)
        message = rule.message or (
            f"The zone 'projects/{self.project}/zones/{zone}' does not have enough "
            "resources available to fulfill the request.  Try a different zone, "
            "or try again later."
        )
        raise Refused(rule.reason, message, rule.status)

    def _live_charges(self, region: str | None) -> builtins.list[Charge]:
        """The charges of the live VMs of ``region``, or of every region."""
        # A stopped (TERMINATED) VM keeps only its disk, as on Compute Engine.
        return [
            vm.charge
            for vm in self._vms.values()
            if vm.status != VmState.TERMINATED and region in (None, region_of(vm.zone))
        ]

    # -- outside the lock --------------------------------------------------------------

    def _stop(self, vms: Sequence[Instance]) -> None:
        runs = [(vm, vm.run) for vm in vms if vm.run is not None]
        for _, run in runs:
            run.signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        for _, run in runs:
            if not run.exited.wait(max(0.0, deadline - time.monotonic())):
                run.signal(signal.SIGKILL)
        for vm, run in runs:
            if not run.exited.wait(KILL_WAIT_S):
                log.warning("VM %s (pid %s) outlived SIGKILL", vm.name, run.pid)

    def _end_notice(self, vm: Instance, notice_s: float) -> None:
        run = vm.run
        if run is not None and not run.exited.wait(notice_s):
            run.signal(signal.SIGKILL)
