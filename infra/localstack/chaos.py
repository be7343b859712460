"""Random Spot preemptions for the local stack: each running Spot VM is
preempted at ``rate_per_vm_hour`` on average (a Poisson process, checked every
second), from a seeded generator so a failing run can be replayed. The
preemptions go over the local cloud's chaos route, as ``spotline preempt``'s do."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence

from spotline.infra.localcloud.chaos_client import ChaosClient
from spotline.shared import logs

_CHECK_S = 1.0


class RandomPreemptions:
    """Args:
    running_spot_vms: (zone, name) of each running Spot VM, now.
    client: the local cloud's chaos routes.
    """

    def __init__(
        self,
        running_spot_vms: Callable[[], Sequence[tuple[str, str]]],
        client: ChaosClient,
        rate_per_vm_hour: float,
        seed: int | None,
        notice_s: float = 30.0,
    ) -> None:
        self.running_spot_vms = running_spot_vms
        self.client = client
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
            for zone, name in self.running_spot_vms():
                if self.random.random() < self.chance_per_check:
                    logs.warning(f"chaos: preempting {name} ({self.notice_s:g} s notice)")
                    try:
                        self.client.preempt(zone, name, self.notice_s)
                    except Exception as err:  # it may have ended meanwhile
                        logs.info(f"chaos: {name} not preempted: {err}")
