"""``LocalCloud``: the local Compute Engine, served on loopback.

It puts together the model (``model``), its operations (``operations``) and
its REST API (``rest_api``), served by ``wire.HttpService``; the real
google-cloud-compute client reaches it with ``api_endpoint=cloud.endpoint``::

    with LocalCloud("demo", RecordLauncher()) as cloud:
        compute = GceCompute("demo", api_endpoint=cloud.endpoint)
        compute.insert(request)
        [sent] = cloud.requests_to("POST", "/instances")

Its methods are for the local stack and for tests: they read and change the
model directly (a VM put in place as if another caller had made it, a chaos
preemption), answering a VM as ``Instance.summary()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Self

from spotline.infra.localcloud.errors import AlreadyExists
from spotline.infra.localcloud.instances import spec_from_request
from spotline.infra.localcloud.launchers import Launcher
from spotline.infra.localcloud.model import CapacityErrors, CapacityRule, ComputeModel
from spotline.infra.localcloud.operations import Operations
from spotline.infra.localcloud.outage import Outage
from spotline.infra.localcloud.rest_api import ComputeApi
from spotline.infra.localcloud.wire import HttpService, JsonDict, RecordedRequest


class LocalCloud:
    """One project's local Compute Engine.

    Args:
        project: the only project it knows.
        launcher: what a booted VM is (``ProcessLauncher`` or ``RecordLauncher``).
        zones, capacity_errors, missing_images, quota_limits, stop_grace_s,
            teardown_s, clock: as ``ComputeModel``.
        operation_polls: ``wait`` calls before an operation reads DONE.
        operation_delay_s: how long every operation takes at least.
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
        operation_polls: int = 1,
        operation_delay_s: float = 0.0,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.project = project
        self.launcher = launcher
        self.model = ComputeModel(
            project,
            launcher,
            zones=zones,
            capacity_errors=capacity_errors,
            missing_images=missing_images,
            quota_limits=quota_limits,
            stop_grace_s=stop_grace_s,
            teardown_s=teardown_s,
            clock=clock,
        )
        self.operations = Operations(project, operation_polls, delay_s=operation_delay_s)
        self.api = ComputeApi(self.model, self.operations)
        self._service = HttpService(self.api)

    @property
    def firewalls(self) -> dict[str, JsonDict]:
        """The project's firewall rules, by name (recorded, never enforced)."""
        return self.api.firewalls.rules

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> Self:
        self._service.start()
        return self

    def close(self) -> None:
        """Stop every VM, then the server."""
        self.model.close()
        self._service.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: GceCompute's ``api_endpoint``."""
        return self._service.endpoint

    # -- configuration -------------------------------------------------------------

    @property
    def capacity_errors(self) -> dict[Any, str | CapacityRule]:
        """Inserts and starts to refuse, by zone or (machine_type, zone); mutable."""
        return self.model.capacity_errors

    @property
    def missing_images(self) -> set[str]:
        """Boot images that do not exist: an insert naming one is answered 404
        ``notFound``, as Compute Engine answers an image it cannot find; mutable."""
        return self.model.missing_images

    @property
    def quota_limits(self) -> dict[str, float]:
        """Every region's quota limits by metric, and the project's
        ``GPUS_ALL_REGIONS``; mutable."""
        return self.model.quota_limits

    def project_quotas(self) -> list[JsonDict]:
        """The project's global quotas, as ``projects.get`` lists them."""
        return self.model.project_quotas()

    @property
    def operation_polls(self) -> int:
        return self.operations.polls

    @operation_polls.setter
    def operation_polls(self, polls: int) -> None:
        self.operations.polls = polls

    def fail_inserts(
        self,
        zone: str,
        machine_type: str | None = None,
        reason: str = "ZONE_RESOURCE_POOL_EXHAUSTED",
        *,
        status: int | None = None,
        message: str | None = None,
    ) -> None:
        """Refuse inserts (of ``machine_type``, or of any) in ``zone`` with
        ``reason``: in the HTTP answer with ``status``, else in the operation."""
        key: Any = zone if machine_type is None else (machine_type, zone)
        self.model.capacity_errors[key] = CapacityRule(reason, status, message)

    def fail_next(
        self,
        method: str,
        path_pattern: str,
        status: int,
        reason: str = "backendError",
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests whose path matches with an error."""
        self.api.fail_next(method, path_pattern, status, reason, times)

    def start_outage(self, outage: Outage) -> Outage:
        """From now on, Compute Engine's routes suffer ``outage`` (replacing
        any other); returns it, whose counts grow as requests meet it."""
        self.api.outage = outage
        return outage

    def end_outage(self) -> Outage | None:
        """Every answer on time and right again; the outage that ended, if any."""
        outage, self.api.outage = self.api.outage, None
        return outage

    # -- the wire --------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request the API has seen, in order."""
        return self.api.recorder.requests

    def requests_to(self, method: str, path_suffix: str) -> list[RecordedRequest]:
        return self.api.recorder.requests_to(method, path_suffix)

    # -- VMs, directly -----------------------------------------------------------------

    def insert(self, fields: Mapping[str, Any]) -> JsonDict:
        """Put a VM in place from ``VmRequest`` fields; an existing name in the
        same zone answers that VM."""
        spec = spec_from_request(fields)
        try:
            [vm] = self.model.create([spec])
        except AlreadyExists:
            found = self.model.find(spec.name, spec.zone)
            if found is None:
                raise
            vm = found
        return vm.summary()

    def instance(self, zone: str, name: str) -> JsonDict | None:
        """The VM as Compute Engine's JSON, or None."""
        vm = self.model.find(name, zone)
        return None if vm is None else vm.to_json(self.project)

    def get(self, name: str, zone: str | None = None) -> JsonDict | None:
        vm = self.model.find(name, zone)
        return None if vm is None else vm.summary()

    def list(self, labels: Mapping[str, str] | None = None) -> list[JsonDict]:
        return [vm.summary() for vm in self.model.list(labels)]

    def delete(self, name: str, zone: str | None = None) -> None:
        self.model.delete(name, zone)

    def stop(self, name: str, zone: str | None = None) -> None:
        self.model.stop(name, zone)

    def preempt(self, name: str, notice_s: float = 30.0, zone: str | None = None) -> JsonDict:
        return self.model.preempt(name, zone, notice_s).summary()

    def kill(self, name: str, zone: str | None = None) -> None:
        self.model.kill(name, zone)

    def show_status(self, zone: str, name: str, status: str) -> None:
        """Answer the VM's ``status`` as ``status`` from now on, whatever the model
        does with it: a state Compute Engine passes through that the model does
        not play (DEPROVISIONING, REPAIRING), or one it may add later."""
        vm = self.model.find(name, zone)
        if vm is None:
            raise KeyError(f"no VM {name} in {zone}")
        vm.shown_status = status

    def freeze(self, name: str, zone: str | None = None) -> JsonDict:
        return self.model.freeze(name, zone).summary()
