"""Where a benchmark's CPU goes: CPU seconds of each part of the local stack,
read from /proc, so that a throughput figure says what it was bound by.

On a 2-core machine the stand-ins (the emulators' java, the local cloud)
compete with the functions being measured; a reader needs their shares to
tell a limit of spotline's code from one of the stand-ins or of the machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cpu(fields: list[str]) -> float:
    # utime and stime, fields 14 and 15 of stat(5), plus cutime and cstime:
    # the children it reaped (gcloud's wrapper reaps nothing until the end).
    return sum(int(v) for v in fields[11:15]) / _TICK


def pid_cpu_s(pid: int) -> float:
    """CPU seconds one process (every thread of it) has used; 0 once it is gone."""
    fields = _stat(pid)
    return _cpu(fields) if fields else 0.0


def group_cpu_s(pgid: int) -> float:
    """CPU seconds of every live process in process group ``pgid`` (an
    emulator: gcloud's wrapper and its java)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat(stat.parent.name)
        if fields and int(fields[2]) == pgid:
            total += _cpu(fields)
    return total


def machine_busy_s() -> float:
    """CPU seconds every process on the machine has used (user, nice, system,
    irq, softirq, steal; /proc/stat): other people's work included."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICK


class CpuMeter:
    """CPU seconds of named parts between ``start`` and ``stop``.

    Each part is a function returning its CPU seconds so far; ``rest`` is
    what the whole machine used besides them (other work on a shared machine).
    """

    def __init__(self, parts: Mapping[str, Callable[[], float]]) -> None:
        self.parts = dict(parts)
        self._before: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        return {"machine": machine_busy_s(), **{name: read() for name, read in self.parts.items()}}

    def start(self) -> None:
        self._before = self._read()

    def stop(self, wall_s: float) -> dict[str, object]:
        """Each part's CPU seconds and its share of the machine's cores over
        ``wall_s`` (1.0: every core, the whole time)."""
        after = self._read()
        used = {name: after[name] - self._before[name] for name in after}
        machine = used.pop("machine")
        used["rest"] = max(machine - sum(used.values()), 0.0)
        cores = os.cpu_count() or 1
        return {
            "cores": cores,
            "cpu_s": {name: round(s, 2) for name, s in used.items()},
            "share_of_cores": {name: round(s / (wall_s * cores), 3) for name, s in used.items()},
            "idle_share": round(max(1 - machine / (wall_s * cores), 0.0), 3),
        }
