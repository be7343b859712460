"""Wrappers of the store and compute ports that crash the function at a chosen
call: the process dies just before the k-th call of a handler's invocation
reaches Firestore or Compute Engine, or just after it did (the write or the VM
request happened, the answer was lost).

They only count and delegate: ``InMemoryStore`` and ``GceCompute`` (on the
local cloud) do the work. ``Crash`` is a BaseException, so neither a handler
nor the reaper's per-action ``except Exception`` survives it, as no code
survives its process dying.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TypeVar

from spotline.shared.domain.catalog import Machine
from spotline.shared.domain.documents import (
    EpochDoc,
    InstanceDoc,
    JobDoc,
    QueueEntry,
    Rejection,
    UserDoc,
)
from spotline.shared.domain.vms import GangRequest, Quota, Vm, VmRequest
from spotline.shared.ports.compute import Compute
from spotline.shared.ports.store import Store
from tests.replay import Crash

T = TypeVar("T")


class Fault:
    """Counts port calls while armed; the ``at``-th crashes (before or after it)."""

    def __init__(self) -> None:
        self.at: int | None = None
        self.after = False
        self.calls = 0
        self.fired: str | None = None  # the call it crashed at

    def arm(self, at: int, *, after: bool) -> None:
        self.at, self.after, self.calls, self.fired = at, after, 0, None

    def disarm(self) -> None:
        self.at = None

    def __call__(self, name: str, call: Callable[[], T]) -> T:
        if self.at is None:
            return call()
        self.calls += 1
        if self.calls != self.at:
            return call()
        self.fired = f"{'after' if self.after else 'before'} call {self.at} ({name})"
        self.at = None  # once: the redelivery runs whole
        if not self.after:
            raise Crash(self.fired)
        call()
        raise Crash(self.fired)


class FaultyStore:
    """``Store``, delegated to ``inner``, each call through ``fault``."""

    def __init__(self, inner: Store, fault: Fault) -> None:
        self.inner, self.fault = inner, fault

    def create_job(self, job: JobDoc) -> bool:
        return self.fault("create_job", lambda: self.inner.create_job(job))

    def get_job(self, job_id: str) -> JobDoc | None:
        return self.fault("get_job", lambda: self.inner.get_job(job_id))

    def get_jobs(self, job_ids: Iterable[str]) -> dict[str, JobDoc]:
        return self.fault("get_jobs", lambda: self.inner.get_jobs(job_ids))

    def update_job(self, job_id: str, change: Callable[[JobDoc], JobDoc]) -> JobDoc | None:
        return self.fault("update_job", lambda: self.inner.update_job(job_id, change))

    def list_jobs(
        self, statuses: Iterable[str] | None = None, limit: int = 200, after: str | None = None
    ) -> list[JobDoc]:
        return self.fault("list_jobs", lambda: self.inner.list_jobs(statuses, limit, after))

    def unpublished_jobs(self, limit: int = 200) -> list[JobDoc]:
        return self.fault("unpublished_jobs", lambda: self.inner.unpublished_jobs(limit))

    def list_job_ids(
        self, statuses: Iterable[str], limit: int = 1000, after: str | None = None
    ) -> list[str]:
        return self.fault("list_job_ids", lambda: self.inner.list_job_ids(statuses, limit, after))

    def recent_jobs(
        self,
        limit: int = 50,
        user: str | None = None,
        statuses: Iterable[str] | None = None,
    ) -> list[JobDoc]:
        return self.fault("recent_jobs", lambda: self.inner.recent_jobs(limit, user, statuses))

    def put_epoch(self, job_id: str, epoch: EpochDoc) -> None:
        return self.fault("put_epoch", lambda: self.inner.put_epoch(job_id, epoch))

    def list_epochs(self, job_id: str) -> list[EpochDoc]:
        return self.fault("list_epochs", lambda: self.inner.list_epochs(job_id))

    def create_instance(self, instance: InstanceDoc) -> bool:
        return self.fault("create_instance", lambda: self.inner.create_instance(instance))

    def get_instance(self, name: str) -> InstanceDoc | None:
        return self.fault("get_instance", lambda: self.inner.get_instance(name))

    def get_instances(self, names: Iterable[str]) -> dict[str, InstanceDoc]:
        return self.fault("get_instances", lambda: self.inner.get_instances(names))

    def update_instance(
        self, name: str, change: Callable[[InstanceDoc], InstanceDoc]
    ) -> InstanceDoc | None:
        return self.fault("update_instance", lambda: self.inner.update_instance(name, change))

    def instances_of_job(self, job_id: str) -> list[InstanceDoc]:
        return self.fault("instances_of_job", lambda: self.inner.instances_of_job(job_id))

    def list_instances(
        self,
        statuses: Iterable[str] | None = None,
        limit: int = 500,
        after: str | None = None,
        user: str | None = None,
    ) -> list[InstanceDoc]:
        return self.fault(
            "list_instances", lambda: self.inner.list_instances(statuses, limit, after, user)
        )

    def stopped_instances(
        self, limit: int = 500, after: str | None = None, user: str | None = None
    ) -> list[InstanceDoc]:
        return self.fault(
            "stopped_instances", lambda: self.inner.stopped_instances(limit, after, user)
        )

    def list_instance_names(
        self, statuses: Iterable[str], limit: int = 1000, after: str | None = None
    ) -> list[str]:
        return self.fault(
            "list_instance_names", lambda: self.inner.list_instance_names(statuses, limit, after)
        )

    def stopped_instance_names(self, limit: int = 1000, after: str | None = None) -> list[str]:
        return self.fault(
            "stopped_instance_names", lambda: self.inner.stopped_instance_names(limit, after)
        )

    def put_queue(self, entry: QueueEntry) -> None:
        return self.fault("put_queue", lambda: self.inner.put_queue(entry))

    def get_queue(self, job_id: str) -> QueueEntry | None:
        return self.fault("get_queue", lambda: self.inner.get_queue(job_id))

    def due_queue(self, now: datetime, limit: int = 50) -> list[QueueEntry]:
        return self.fault("due_queue", lambda: self.inner.due_queue(now, limit))

    def delete_queue(self, job_id: str) -> None:
        return self.fault("delete_queue", lambda: self.inner.delete_queue(job_id))

    def queue_of_user(self, user: str) -> list[QueueEntry]:
        return self.fault("queue_of_user", lambda: self.inner.queue_of_user(user))

    def get_user(self, user: str) -> UserDoc | None:
        return self.fault("get_user", lambda: self.inner.get_user(user))

    def update_user(self, user: str, change: Callable[[UserDoc], UserDoc]) -> UserDoc:
        return self.fault("update_user", lambda: self.inner.update_user(user, change))

    def get_users(self, users: Iterable[str]) -> dict[str, UserDoc]:
        return self.fault("get_users", lambda: self.inner.get_users(users))

    def list_users(self, limit: int = 1000, after: str | None = None) -> list[UserDoc]:
        return self.fault("list_users", lambda: self.inner.list_users(limit, after))

    def list_user_names(self, limit: int = 1000, after: str | None = None) -> list[str]:
        return self.fault("list_user_names", lambda: self.inner.list_user_names(limit, after))

    def seed_machines(self, catalog: dict[str, Machine]) -> None:
        return self.fault("seed_machines", lambda: self.inner.seed_machines(catalog))

    def get_machine(self, machine_id: str) -> Machine | None:
        return self.fault("get_machine", lambda: self.inner.get_machine(machine_id))

    def record_request(self, machine_id: str, ok: bool, now: datetime) -> None:
        return self.fault("record_request", lambda: self.inner.record_request(machine_id, ok, now))

    def availability(self, machine_id: str, since: datetime) -> tuple[int, int]:
        return self.fault("availability", lambda: self.inner.availability(machine_id, since))

    def record_rejection(self, rejection: Rejection) -> bool:
        return self.fault("record_rejection", lambda: self.inner.record_rejection(rejection))

    def get_rejection(self, message_id: str) -> Rejection | None:
        return self.fault("get_rejection", lambda: self.inner.get_rejection(message_id))

    def recent_rejections(self, limit: int = 20) -> list[Rejection]:
        return self.fault("recent_rejections", lambda: self.inner.recent_rejections(limit))


class FaultyCompute:
    """``Compute``, delegated to ``inner``, each call through ``fault``."""

    def __init__(self, inner: Compute, fault: Fault) -> None:
        self.inner, self.fault = inner, fault

    def insert(self, request: VmRequest) -> Vm:
        return self.fault("insert", lambda: self.inner.insert(request))

    def get(self, zone: str, name: str) -> Vm | None:
        return self.fault("get", lambda: self.inner.get(zone, name))

    def list(self, labels: dict[str, str]) -> builtins.list[Vm]:
        return self.fault("list", lambda: self.inner.list(labels))

    def delete(self, zone: str, name: str) -> None:
        return self.fault("delete", lambda: self.inner.delete(zone, name))

    def delete_many(self, vms: Sequence[tuple[str, str]]) -> None:
        return self.fault("delete", lambda: self.inner.delete_many(vms))

    def set_metadata(
        self,
        zone: str,
        name: str,
        items: dict[str, str],
        unless: Callable[[dict[str, str]], bool] | None = None,
    ) -> None:
        return self.fault(
            "set_metadata", lambda: self.inner.set_metadata(zone, name, items, unless)
        )

    def stop(self, zone: str, name: str) -> bool:
        return self.fault("stop", lambda: self.inner.stop(zone, name))

    def start(self, zone: str, name: str) -> None:
        return self.fault("start", lambda: self.inner.start(zone, name))

    def insert_gang(self, gang: GangRequest) -> builtins.list[Vm]:
        return self.fault("insert_gang", lambda: self.inner.insert_gang(gang))

    def region_quotas(self, region: str) -> dict[str, Quota]:
        return self.fault("region_quotas", lambda: self.inner.region_quotas(region))

    def allow_gang(self, tag: str) -> None:
        return self.fault("allow_gang", lambda: self.inner.allow_gang(tag))

    def end_gang(self, tag: str) -> None:
        return self.fault("end_gang", lambda: self.inner.end_gang(tag))

    def gang_rules(self) -> builtins.list[str]:
        return self.fault("gang_rules", self.inner.gang_rules)


def _conforms(store: FaultyStore, compute: FaultyCompute) -> tuple[Store, Compute]:
    """mypy checks here that the wrappers implement the ports."""
    return store, compute
