"""Random Spot preemptions for the local stack: each running Spot VM is
preempted at ``rate_per_vm_hour`` on average (a Poisson process, checked every
second), from a seeded generator so a failing run can be replayed."""

from __future__ import annotations

import random
import threading

from infra.localcloud.vm_host import VmHost
from shared import logs

_CHECK_S = 1.0


class RandomPreemptions:
    def __init__(
        self, host: VmHost, rate_per_vm_hour: float, seed: int | None, notice_s: float = 30.0
    ) -> None:
        self.host = host
        self.chance_per_check = rate_per_vm_hour * _CHECK_S / 3600.0
        self.random = random.Random(seed)
        self.notice_s = notice_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="random-preemptions", daemon=True)

    def start(self) -> RandomPreemptions:
        if self.chance_per_check > 0:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(_CHECK_S):
            for name in self.host.running_spot_vms():
                if self.random.random() < self.chance_per_check:
                    logs.warning(f"chaos: preempting {name} ({self.notice_s:g} s notice)")
                    try:
                        self.host.preempt(name, self.notice_s)
                    except Exception as err:  # it may have ended meanwhile
                        logs.info(f"chaos: {name} not preempted: {err}")
