"""``Job``: one job of spotline, by its id, and what can be asked of it."""

from __future__ import annotations

import io
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING

from spotline.infra.client.connection import Connection, connect
from spotline.infra.client.errors import JobNotFound, SpecError, WaitTimeout
from spotline.infra.client.records import JobState

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from spotline.infra.client.submission import Published
    from spotline.shared.domain.documents import EpochDoc, JobDoc
    from spotline.shared.domain.timeline import Timeline

# How long a job just published may take to get its document (the submit
# function's cold start, on a busy emulator too).
_RECORDED_WITHIN_S = 60.0
_POLL_S = 0.5


class Job:
    """A job, by id. Made by ``spotline.submit`` and ``spotline.replay``, or
    ``Job("j1234abcd5678")`` for one submitted elsewhere; each method reads
    the job's document (in Firestore) when called.

    Args:
        job_id: the job's id.
        workdir: the local stack's folder (default: ``$SPOTLINE_WORKDIR``,
            else ``.spotline``); where spotline is found as ``spotline`` finds it.
    """

    def __init__(
        self,
        job_id: str,
        *,
        workdir: str | os.PathLike[str] | None = None,
        connection: Connection | None = None,
        published: Published | None = None,
    ) -> None:
        self.id = job_id
        self._workdir = workdir
        self._conn = connection
        self.published = published  # what submitting it did; None for a job found by id
        self.doc: JobDoc | None = None  # the document as last read

    def __repr__(self) -> str:
        status = "" if self.doc is None else f", {self.doc.status}/{self.doc.substatus}"
        return f"Job({self.id!r}{status})"

    @property
    def connection(self) -> Connection:
        if self._conn is None:
            self._conn = connect(self._workdir)
        return self._conn

    # -- its state ---------------------------------------------------------------

    def refresh(self) -> JobDoc:
        """Read the job's document again (``doc``: every field Firestore holds).

        A job just published is waited for until the submit function has
        recorded it.

        Raises:
            JobNotFound: no such job.
            SpecError: the submit function refused the job (``spotline rejected``).
        """
        store = self.connection.store
        deadline = time.monotonic() + (_RECORDED_WITHIN_S if self.published else 0.0)
        while True:
            doc = store.get_job(self.id)
            if doc is not None:
                self.doc = doc
                return doc
            if self.published is not None:
                refused = store.get_rejection(self.published.message_id)
                if refused is not None:
                    raise SpecError([refused.reason], f"job {self.id}")
            if time.monotonic() >= deadline:
                raise JobNotFound(self.id)
            time.sleep(_POLL_S)

    def status(self) -> JobState:
        """The job's status, substatus, progress, error and metrics, read now."""
        return JobState.of(self.refresh())

    def wait(self, timeout: float | None = None) -> JobState:
        """Until the job has ended (COMPLETED, FAILED or CANCELED); its final state.

        Raises:
            WaitTimeout: still running after ``timeout`` seconds (it goes on).
        """
        start = time.monotonic()
        while True:
            state = self.status()
            if state.ended:
                return state
            if timeout is not None and time.monotonic() - start >= timeout:
                raise WaitTimeout(self.id, timeout, f"{state.status}/{state.substatus}")
            time.sleep(_POLL_S)

    def watch(self, out: IO[str] | None = None, live: bool | None = None) -> JobState:
        """Follow the job live until it ends: a progress bar redrawn on a
        terminal, a line per change elsewhere (a notebook, a pipe); its final
        state. Interrupting it (Ctrl-C, a notebook's stop) raises
        KeyboardInterrupt and leaves the job running."""
        from spotline.infra.client.watching import follow
        from spotline.shared.adapters.firestore_listen import JobFeed

        with JobFeed(self.connection.store, [self.id]) as feed:
            [ended] = follow(feed, [self.id], out, live)
        self.doc = ended
        return JobState.of(ended)

    # -- what it did -------------------------------------------------------------

    def logs(
        self,
        follow: bool = False,
        *,
        attempt: int | None = None,
        node: int | None = None,
        out: IO[str] | None = None,
    ) -> str:
        """The job's output, attempt by attempt, as ``spotline logs`` prints it.
        With ``follow``, printed to ``out`` (stdout) as it comes until the job
        has ended, and returned whole then.

        Raises:
            LogsUnreadable: Cloud Logging cannot be read (the query to try instead).
        """
        from spotline.infra.client import logs as job_logs

        conn = self.connection
        doc = self.refresh()
        source = job_logs.source_of(conn)
        with job_logs.cloud_logging_errors(conn, doc):
            if not follow:
                return job_logs.text_of(job_logs.lines_of(source, doc, attempt, node), node)
            copy = _Tee(out or sys.stdout)
            job_logs.follow(source, conn.store, self.id, attempt, node, copy)
            return copy.getvalue().rstrip("\n")

    def epochs(self) -> list[EpochDoc]:
        """The job's epoch records (``jobs/JOB/epochs``), one per attempt that
        reported the epoch: a resumed attempt reports the epoch it went on
        with again. Each has ``epoch``, ``attempt``, ``step`` and ``metrics``."""
        self.refresh()  # JobNotFound for a job that is not
        return self.connection.store.list_epochs(self.id)

    def timeline(self) -> Timeline:
        """Where the job's time went, phase by phase and attempt by attempt
        (``spotline timeline``): ``totals()``, ``by_attempt()``, ``segments``."""
        from spotline.shared.domain.states import JobStatus
        from spotline.shared.domain.timeline import timeline

        doc = self.refresh()
        ended = doc.status in JobStatus.terminal()
        return timeline(doc.history, None if ended else datetime.now(UTC))

    def plot_timeline(self, chart: str = "pie") -> Figure:
        """The timeline's pie or funnel chart (``spotline timeline --chart``) as
        a matplotlib figure: a notebook shows it; ``savefig`` writes it.

        Raises:
            ChartsUnavailable: matplotlib is not installed (the ``viz`` extra).
        """
        from spotline.infra.client.charts import figure

        found = self.timeline()
        assert self.doc is not None
        title = f"{self.id}: {self.doc.status}, {len(found.by_attempt())} attempt(s)"
        return figure(found, chart, title)

    def checkpoints(self, directory: str | os.PathLike[str] = ".") -> list[Path]:
        """Download the job's saved state into ``directory/JOB/checkpoints``;
        the files there. Raises NothingStored when it saved none (yet)."""
        return self._download("checkpoints", Path(directory) / self.id / "checkpoints")

    def outputs(self, directory: str | os.PathLike[str] = ".") -> list[Path]:
        """Download what the job left in its outputs folder (``SPOTLINE_OUTPUT_DIR``
        on the VM) into ``directory/JOB/outputs``; the files there. Raises
        NothingStored when it left none (yet)."""
        return self._download("outputs", Path(directory) / self.id / "outputs")

    def tensorboard(self, directory: str | os.PathLike[str] = ".") -> list[Path]:
        """Download the job's TensorBoard logs into ``directory/logs/JOB``
        (``tensorboard --logdir`` it); the files there. Raises NothingStored
        when there are none (yet)."""
        return self._download("tensorboard", Path(directory) / "logs" / self.id)

    def _download(self, kind: str, target: Path) -> list[Path]:
        from spotline.infra.client.downloads import download

        doc = self.refresh()  # JobNotFound for a job that is not
        return download(self.connection.settings.job_prefix(self.id, doc.user), kind, target)

    # -- changing it -------------------------------------------------------------

    def cancel(self, reason: str = "canceled by the user") -> bool:
        """Ask spotline to cancel the job (its VMs are deleted); False when it
        has ended already. ``wait()`` then sees it CANCELED."""
        from spotline.shared.domain.states import JobStatus

        doc = self.refresh()
        if doc.status in JobStatus.terminal():
            return False
        publish_cancel(self.connection, doc, reason)
        return True


def publish_cancel(conn: Connection, job: JobDoc, reason: str) -> str:
    """A cancel of ``job`` on its user's topic (in the per-user mode IAM says
    whether you may); the message id."""
    from spotline.shared.contract.events import CancelRequest

    bus, _ = conn.bus(job.user)
    return bus.publish("cancel", CancelRequest(job_id=job.job_id, reason=reason))


class _Tee(io.StringIO):
    """Text written to ``out`` as it comes, and kept."""

    def __init__(self, out: IO[str]) -> None:
        super().__init__()
        self.out = out

    def write(self, text: str) -> int:
        self.out.write(text)
        return super().write(text)

    def flush(self) -> None:
        self.out.flush()
