"""A process that dies part-way, for the re-entrancy tests: every side effect
(a document written, a VM created or deleted) ticks one ``Budget``; the tick
past the budget raises ``Crash`` instead of doing it.

The store is the in-memory one with the same guarded-update contract; the
Compute port is the real client on the local cloud. Neither changes what a
call does: they only stop the process before the call.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence

from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain.documents import EpochDoc, InstanceDoc, JobDoc, QueueEntry, UserDoc
from spotline.shared.domain.vms import GangRequest, Quota, Vm, VmRequest
from spotline.shared.ports.compute import Compute


class Crash(BaseException):
    """The process dies here. Not an ``Exception``: the sweep's per-action
    guard must not catch it, as it cannot catch a kill."""


class Budget:
    """``left`` side effects happen, the next one crashes (None: never)."""

    def __init__(self, left: int | None = None) -> None:
        self.left = left
        self.done: list[str] = []

    def tick(self, what: str) -> None:
        if self.left is not None and len(self.done) >= self.left:
            raise Crash(f"killed before {what} (after {', '.join(self.done) or 'nothing'})")
        self.done.append(what)


class CrashingStore(InMemoryStore):
    def __init__(self, budget: Budget) -> None:
        super().__init__()
        self.budget = budget

    def create_job(self, job: JobDoc) -> bool:
        self.budget.tick(f"create job {job.job_id}")
        return super().create_job(job)

    def update_job(self, job_id: str, change: Callable[[JobDoc], JobDoc]) -> JobDoc | None:
        self.budget.tick(f"update job {job_id}")
        return super().update_job(job_id, change)

    def put_epoch(self, job_id: str, epoch: EpochDoc) -> None:
        self.budget.tick(f"put epoch {job_id}")
        super().put_epoch(job_id, epoch)

    def create_instance(self, instance: InstanceDoc) -> bool:
        self.budget.tick(f"create instance {instance.name}")
        return super().create_instance(instance)

    def update_instance(
        self, name: str, change: Callable[[InstanceDoc], InstanceDoc]
    ) -> InstanceDoc | None:
        self.budget.tick(f"update instance {name}")
        return super().update_instance(name, change)

    def put_queue(self, entry: QueueEntry) -> None:
        self.budget.tick(f"put queue {entry.job_id}")
        super().put_queue(entry)

    def delete_queue(self, job_id: str) -> None:
        self.budget.tick(f"delete queue {job_id}")
        super().delete_queue(job_id)

    def update_user(self, user: str, change: Callable[[UserDoc], UserDoc]) -> UserDoc:
        self.budget.tick(f"update user {user}")
        return super().update_user(user, change)


class CrashingCompute:
    """The Compute port: every call that changes a VM ticks the budget first."""

    def __init__(self, compute: Compute, budget: Budget) -> None:
        self.compute = compute
        self.budget = budget

    def insert(self, request: VmRequest) -> Vm:
        self.budget.tick(f"insert {request.name}")
        return self.compute.insert(request)

    def get(self, zone: str, name: str) -> Vm | None:
        return self.compute.get(zone, name)

    def list(self, labels: dict[str, str]) -> builtins.list[Vm]:
        return self.compute.list(labels)

    def delete(self, zone: str, name: str) -> None:
        self.budget.tick(f"delete {name}")
        self.compute.delete(zone, name)

    def delete_many(self, vms: Sequence[tuple[str, str]]) -> None:
        for _, name in vms:
            self.budget.tick(f"delete {name}")
        self.compute.delete_many(vms)

    def set_metadata(
        self,
        zone: str,
        name: str,
        items: dict[str, str],
        unless: Callable[[dict[str, str]], bool] | None = None,
    ) -> None:
        self.budget.tick(f"set metadata {name}")
        self.compute.set_metadata(zone, name, items, unless)

    def stop(self, zone: str, name: str) -> bool:
        self.budget.tick(f"stop {name}")
        return self.compute.stop(zone, name)

    def start(self, zone: str, name: str) -> None:
        self.budget.tick(f"start {name}")
        self.compute.start(zone, name)

    def insert_gang(self, gang: GangRequest) -> builtins.list[Vm]:
        self.budget.tick(f"insert gang {gang.nodes[0].name}")
        return self.compute.insert_gang(gang)

    def region_quotas(self, region: str) -> dict[str, Quota]:
        return self.compute.region_quotas(region)

    def allow_gang(self, tag: str) -> None:
        self.budget.tick(f"allow gang {tag}")
        self.compute.allow_gang(tag)

    def end_gang(self, tag: str) -> None:
        self.budget.tick(f"end gang {tag}")
        self.compute.end_gang(tag)

    def gang_rules(self) -> builtins.list[str]:
        return self.compute.gang_rules()
