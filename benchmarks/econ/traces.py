"""Preemption traces: when Compute Engine takes a Spot VM back.

A trace is a list of preemptions, each a time (hours since the job's
submission) and a node (the gang's rank, 0 for a one-VM job). A Spot VM that
holds that node at that time (booting or training) is preempted; a preemption
that finds no Spot VM there hits nothing. On-demand VMs are never preempted.

File format (``--trace FILE``): JSON lines, one preemption a line, blank lines
and lines starting with ``#`` ignored::

    {"t_h": 2.5, "node": 0}
    {"t_h": 7.25}            # node defaults to 0

A seeded Poisson trace at rate r per VM-hour draws, for each node, the gaps
between preemptions from an exponential distribution of mean 1/r hours
(memoryless, so it is the same as drawing each VM's lifetime).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, order=True)
class Preemption:
    t_h: float
    node: int = 0


@dataclass(frozen=True)
class Trace:
    name: str
    preemptions: tuple[Preemption, ...]

    def for_nodes(self, nodes: int) -> list[Preemption]:
        """The preemptions of a gang of ``nodes``, in time order."""
        return sorted(p for p in self.preemptions if p.node < nodes)


def poisson(rate_per_h: float, nodes: int, hours: float, seed: int) -> Trace:
    """Preemptions at ``rate_per_h`` per VM-hour on each of ``nodes`` over ``hours``."""
    if rate_per_h < 0:
        raise ValueError(f"rate {rate_per_h}: a preemption rate is >= 0")
    rng = random.Random(f"{seed}:{rate_per_h}")
    found: list[Preemption] = []
    for node in range(nodes):
        t = 0.0
        while rate_per_h > 0:
            t += rng.expovariate(rate_per_h)
            if t >= hours:
                break
            found.append(Preemption(t, node))
    return Trace(f"poisson {rate_per_h}/h seed {seed}", tuple(sorted(found)))


def load(path: Path) -> Trace:
    """A trace file (JSON lines, see the module's docstring).

    Raises:
        ValueError: a line that is not a preemption, named by its number.
    """
    found: list[Preemption] = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not JSON ({err.msg})") from err
        if not isinstance(record, dict) or set(record) - {"t_h", "node"}:
            raise ValueError(f'{where}: expected {{"t_h": HOURS, "node": RANK}}, got {line}')
        t_h, node = record.get("t_h"), record.get("node", 0)
        if isinstance(t_h, bool) or not isinstance(t_h, int | float) or t_h < 0:
            raise ValueError(f"{where}: t_h must be a number of hours >= 0, got {t_h!r}")
        if isinstance(node, bool) or not isinstance(node, int) or node < 0:
            raise ValueError(f"{where}: node must be a rank >= 0, got {node!r}")
        found.append(Preemption(float(t_h), node))
    return Trace(path.name, tuple(sorted(found)))
