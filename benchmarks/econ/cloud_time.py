"""Compute Engine's time, which the local cloud does not take: the compute
port of a simulated run, delegating every call to spotline's real adapter
(``GceCompute`` against the local cloud) and charging the virtual clock what
the call would have waited for on Compute Engine.

Only deletes are charged: an insert's time is in ``Params.boot_s`` (insert ->
training), and reads are fast. A delete waits until its VM is gone
(``Params.delete_done_s``); ``delete_many`` waits for the last of its VMs, each
delete sent before any is waited for. Each VM's billed time runs from its
insert to its being gone, whoever ends it.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spotline.shared.domain.vms import GangRequest, Quota, Vm, VmRequest
from spotline.shared.ports.compute import Compute


@dataclass
class Billing:
    """Each VM's life in simulated seconds: from its insert to its end."""

    born: dict[str, float] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)

    def ended(self, name: str, at_s: float) -> None:
        """The VM is gone at ``at_s`` (the first end counts: a later delete of
        a VM Compute Engine already took bills nothing)."""
        if name in self.born:
            self.gone[name] = min(self.gone.get(name, at_s), at_s)

    def vm_s(self, end_s: float) -> float:
        """VM-seconds billed up to ``end_s`` (VMs not gone by then bill to it)."""
        return sum(min(self.gone.get(n, end_s), end_s) - born for n, born in self.born.items())


class TimedCompute:
    """``Compute`` over ``inner``, with Compute Engine's waits on a virtual clock.

    Args:
        now: the current simulated time of the handler making the call.
        done_at: when a delete of VM ``name`` sent at a time has it gone.
        wait: advances the handler's clock by the seconds it waited.
    """

    def __init__(
        self,
        inner: Compute,
        now: Callable[[], float],
        done_at: Callable[[str, float], float],
        wait: Callable[[float], None],
    ) -> None:
        self.inner, self._now, self._done_at, self._wait = inner, now, done_at, wait
        self.billing = Billing()
        self.deletes_waited_s = 0.0  # all delete waits of the run

    def insert(self, request: VmRequest) -> Vm:
        vm = self.inner.insert(request)
        self.billing.born.setdefault(vm.name, self._now())
        return vm

    def insert_gang(self, gang: GangRequest) -> builtins.list[Vm]:
        vms = self.inner.insert_gang(gang)
        for vm in vms:
            self.billing.born.setdefault(vm.name, self._now())
        return vms

    def delete(self, zone: str, name: str) -> None:
        self.delete_many([(zone, name)])

    def delete_many(self, vms: Sequence[tuple[str, str]]) -> None:
        sent = self._now()
        ends = {name: self._done_at(name, sent) for _, name in vms}  # before they go
        self.inner.delete_many(vms)
        for name, end in ends.items():
            self.billing.ended(name, end)
        waited = max([0.0, *(end - sent for end in ends.values())])
        self.deletes_waited_s += waited
        self._wait(waited)

    def get(self, zone: str, name: str) -> Vm | None:
        return self.inner.get(zone, name)

    def list(self, labels: dict[str, str]) -> builtins.list[Vm]:
        return self.inner.list(labels)

    def set_metadata(
        self,
        zone: str,
        name: str,
        items: dict[str, str],
        unless: Callable[[dict[str, str]], bool] | None = None,
    ) -> None:
        self.inner.set_metadata(zone, name, items, unless)

    def stop(self, zone: str, name: str) -> bool:
        return self.inner.stop(zone, name)

    def start(self, zone: str, name: str) -> None:
        self.inner.start(zone, name)

    def region_quotas(self, region: str) -> dict[str, Quota]:
        return self.inner.region_quotas(region)

    def allow_gang(self, tag: str) -> None:
        self.inner.allow_gang(tag)

    def end_gang(self, tag: str) -> None:
        self.inner.end_gang(tag)

    def gang_rules(self) -> builtins.list[str]:
        return self.inner.gang_rules()
