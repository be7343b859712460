"""Jobs followed live, through Firestore listeners
(``spotline.shared.adapters.firestore_listen``): ``Job.watch()``, ``spotline
watch`` and ``submit --follow``.

On a terminal: one row per job with a progress bar (epoch x/y), the ETA from
the epochs' times, its status and its latest metrics, redrawn as changes
arrive. Elsewhere (a pipe, a notebook): one line per change (a new status, a
line the history notes without one, or a new epoch). Following named jobs
ends when all of them have ended; with none named, it goes on until
interrupted (KeyboardInterrupt goes through).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

    from spotline.shared.adapters.firestore_listen import Change, JobFeed
    from spotline.shared.domain.documents import EpochDoc, JobDoc

_METRICS_SHOWN = 3


@dataclass
class Watched:
    """What the view knows of one job."""

    job: JobDoc
    epochs: list[EpochDoc] = field(default_factory=list)


def follow(
    feed: JobFeed,
    job_ids: Sequence[str],
    out: IO[str] | None = None,
    live: bool | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[JobDoc]:
    """Show the feed's changes until every job of ``job_ids`` has ended (with
    none, until interrupted); those jobs as they ended. ``live``: redraw a
    table (default: on a terminal that is not a notebook's)."""
    out = out or sys.stdout
    live = (out.isatty() and not in_notebook()) if live is None else live
    view = _LiveView(out, clock) if live else _LineView(out, clock)
    with view:
        while True:
            change = feed.next(timeout_s=1.0)
            if change is not None:
                view.apply(change)
            elif live:
                view.refresh()  # the ETA counts down between changes
            if job_ids and view.ended(job_ids):
                return [view.jobs[j].job for j in job_ids]


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel, where lines read better than a
    table redrawn in place."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython else None
    return type(shell).__name__ == "ZMQInteractiveShell"


class _View:
    def __init__(self, out: IO[str], clock: Callable[[], datetime]) -> None:
        self.out = out
        self.clock = clock
        self.jobs: dict[str, Watched] = {}

    def __enter__(self) -> _View:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def apply(self, change: Change) -> None:
        from spotline.shared.adapters.firestore_listen import JobChanged

        if isinstance(change, JobChanged):
            job = change.job
            known = self.jobs.get(job.job_id)
            self.jobs[job.job_id] = Watched(job, known.epochs if known else [])
            self.job_changed(known.job if known else None, job)
        else:
            watched = self.jobs.get(change.job_id)
            if watched is None:
                return  # its document comes first; the epochs travel again with the next
            before = {(e.attempt, e.epoch) for e in watched.epochs}
            watched.epochs = change.epochs
            new = [e for e in change.epochs if (e.attempt, e.epoch) not in before]
            self.epochs_added(watched, new)

    def ended(self, job_ids: Sequence[str]) -> bool:
        from spotline.shared.domain.states import JobStatus

        return all(
            j in self.jobs and self.jobs[j].job.status in JobStatus.terminal() for j in job_ids
        )

    def refresh(self) -> None:
        return None

    def job_changed(self, before: JobDoc | None, job: JobDoc) -> None:
        raise NotImplementedError

    def epochs_added(self, watched: Watched, new: list[EpochDoc]) -> None:
        raise NotImplementedError

    def eta(self, watched: Watched) -> str:
        from spotline.infra.client.charts import duration
        from spotline.shared.domain.progress import eta_s

        left = eta_s(watched.job, watched.epochs, self.clock())
        return "" if left is None else f"ETA {duration(left)}"


class _LineView(_View):
    """A line per change: status moves and new epochs."""

    def job_changed(self, before: JobDoc | None, job: JobDoc) -> None:
        if job.nothing_saved and (before is None or before.nothing_saved != job.nothing_saved):
            self._line(job.job_id, f"nothing saved: {job.nothing_saved}")
        if before is not None and (before.substatus, before.attempt) == (
            job.substatus,
            job.attempt,
        ):
            # No move, but what the history noted meanwhile (a gang's further loss).
            for entry in job.history[len(before.history) :]:
                if entry.note:
                    self._line(job.job_id, f"{entry.status}/{entry.substatus}  {entry.note}")
            return
        detail = f"  attempt {job.attempt}" if job.attempt > 1 else ""
        if job.error and job.status == "FAILED":
            detail += f"  {job.error.splitlines()[0][:120]}"
        self._line(job.job_id, f"{job.status}/{job.substatus}{detail}")

    def epochs_added(self, watched: Watched, new: list[EpochDoc]) -> None:
        for epoch in new:
            parts = [f"epoch {epoch.epoch}/{epoch.epochs}", self.eta(watched), _metrics(epoch)]
            self._line(watched.job.job_id, "  ".join(p for p in parts if p))

    def _line(self, job_id: str, text: str) -> None:
        print(f"{self.clock():%H:%M:%S}  {job_id}  {text}", file=self.out, flush=True)


class _LiveView(_View):
    """A table redrawn in place (rich), a progress bar per job."""

    def __enter__(self) -> _LiveView:
        from rich.console import Console
        from rich.live import Live

        self._live = Live(console=Console(file=self.out), auto_refresh=False, transient=False)
        self._live.__enter__()
        return self

    def __exit__(self, *args: object) -> None:
        self.refresh()
        self._live.__exit__(None, None, None)

    def job_changed(self, before: JobDoc | None, job: JobDoc) -> None:
        self.refresh()

    def epochs_added(self, watched: Watched, new: list[EpochDoc]) -> None:
        self.refresh()

    def refresh(self) -> None:
        self._live.update(self._table(), refresh=True)

    def _table(self) -> RenderableType:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        table = Table(box=None, pad_edge=False, expand=False)
        for column in ("JOB", "STATUS", "PROGRESS", "EPOCH", "ETA", "METRICS"):
            table.add_column(column, no_wrap=column != "METRICS")
        for watched in self.jobs.values():
            job = watched.job
            epochs = job.spec.epochs or 1
            bar = ProgressBar(total=epochs, completed=min(job.epoch, epochs), width=20)
            latest = watched.epochs[-1] if watched.epochs else None
            table.add_row(
                job.job_id,
                f"{job.status}/{job.substatus}",
                bar,
                f"{job.epoch}/{job.spec.epochs}",
                self.eta(watched).removeprefix("ETA "),
                _metrics(latest) if latest else _metrics_of(job.metrics),
            )
        return table


def _metrics(epoch: EpochDoc) -> str:
    return _metrics_of(epoch.metrics)


def _metrics_of(metrics: dict[str, float | None]) -> str:
    shown = list(metrics.items())[:_METRICS_SHOWN]
    return " ".join(f"{k}={'nan' if v is None else f'{v:.4g}'}" for k, v in shown)
