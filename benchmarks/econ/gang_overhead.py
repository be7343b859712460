"""Where a gang's makespan goes beyond an on-demand run's, by cause, in the
model (``gang_model``): every second of a Spot run's makespan past the
on-demand run's is charged to one cause, so the causes add up to the whole
overhead of a finished run (the first boot is the on-demand run's too)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from benchmarks.econ.breakdown import field_means


@dataclass
class Overhead:
    """Seconds of makespan beyond on demand, summed over one run's losses.

    Attributes:
        heard_s: a notice -> the loss acted on: the save (or the step) on the
            notice and the report's delivery (and the replacement's boot
            report's); the poller's detection.
        delete_wait_s: the old nodes' deletes waited for before the next
            insert (spotline before the restore gate; the poller's teardown).
        boot_s: the new VMs' insert and boot (a gang's slowest node): the
            survivors' idle wait for a replacement, or the whole gang's.
        gate_s: the restore gate beyond the boot (the lost VM not yet gone).
        restart_s: the ranks restarted from the save once the gang is whole.
        resize_s: an elastic gang's save, its report and the restart at each
            change of size.
        smaller_s: work not done while an elastic gang trains smaller
            (a second at k of n nodes does k/n of a second's work).
        lost_s: work since the last save, redone.
        stall_s: the poller's periodic checkpoints' stalls.
        overlap_s: a further loss while the gang already waited: how much
            longer it waited (less, when the replacement lost while booting
            is replaced by one that boots faster).
    """

    heard_s: float = 0.0
    delete_wait_s: float = 0.0
    boot_s: float = 0.0
    gate_s: float = 0.0
    restart_s: float = 0.0
    resize_s: float = 0.0
    smaller_s: float = 0.0
    lost_s: float = 0.0
    stall_s: float = 0.0
    overlap_s: float = 0.0

    @property
    def total_s(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def add(self, **seconds: float) -> None:
        for name, value in seconds.items():
            setattr(self, name, getattr(self, name) + value)

    @staticmethod
    def mean(parts: Sequence[Overhead]) -> Overhead:
        return field_means(Overhead, parts)


# The causes as the benchmark's table heads them.
HEADS = {
    "heard_s": "loss heard",
    "delete_wait_s": "delete wait",
    "boot_s": "insert + boot",
    "gate_s": "restore gate",
    "restart_s": "restart",
    "resize_s": "resize (save + restart)",
    "smaller_s": "smaller gang",
    "lost_s": "work redone",
    "stall_s": "periodic stalls",
    "overlap_s": "further losses",
}


def markdown(rows: Sequence[tuple[str, Overhead, float]]) -> str:
    """Each (label, mean overhead, on-demand makespan) as percent of the
    on-demand makespan, cause by cause, and the total."""
    heads = " | ".join(HEADS.values())
    lines = [f"| cell, strategy | {heads} | total |", "|---|" + "---|" * (len(HEADS) + 1)]
    for label, spent, base_s in rows:
        cells = " | ".join(f"{100 * getattr(spent, name) / base_s:.1f}" for name in HEADS)
        lines.append(f"| {label} | {cells} | {100 * spent.total_s / base_s:+.1f} % |")
    return "\n".join(lines)
