"""A job's output, attempt by attempt and node by node, once or followed until
the job ends (``Job.logs``, ``spotline logs``).

Where the lines come from is log_sources.py: the local VMs' files, or Cloud
Logging in the cloud.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING

from spotline.infra.client.errors import LogsUnreadable
from spotline.infra.client.log_sources import (
    CloudSource,
    LocalSource,
    LogLine,
    Source,
    node_instance,
)
from spotline.shared.domain.documents import AttemptRecord, JobDoc

if TYPE_CHECKING:
    from spotline.infra.client.connection import Connection
    from spotline.shared.adapters.firestore_store import FirestoreStore


def source_of(conn: Connection) -> Source:
    """Where a job's lines are: the local VMs' files, or Cloud Logging."""
    from spotline.infra.localstack.stack import read_stack_workdir

    if conn.local:
        return LocalSource(read_stack_workdir(conn.workdir) / "vms")
    return CloudSource(conn.settings.project)


@contextlib.contextmanager
def cloud_logging_errors(conn: Connection, job: JobDoc) -> Iterator[None]:
    """Cloud Logging's refusals as LogsUnreadable, with the query to try."""
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError

    try:
        yield
    except (GoogleAPIError, GoogleAuthError) as err:  # no credentials, no right, down
        reason = " ".join(str(err).split())
        query = next((a.logs_query for a in job.attempts if a.logs_query), "")
        raise LogsUnreadable(reason, query, conn.settings.project) from err


def lines_of(
    source: Source, job: JobDoc, attempt: int | None, node: int | None
) -> list[tuple[AttemptRecord, list[LogLine]]]:
    """The lines of the job's attempts (or of one), node by node."""
    attempts = [a for a in job.attempts if attempt in (None, a.attempt)]
    return [
        (record, sorted(source.new_lines(job.job_id, record, node), key=lambda line: line.node))
        for record in attempts
    ]


def show(
    source: Source, job: JobDoc, attempt: int | None, node: int | None, as_json: bool, out: IO[str]
) -> int:
    """Print the lines of the job's attempts (or of one), node by node."""
    found = lines_of(source, job, attempt, node)
    if not found:
        print(f"job {job.job_id} has no attempt {attempt or ''} with a VM yet", file=sys.stderr)
        return 1
    if as_json:
        rows = [line.to_json() for _, lines in found for line in lines]
        print(json.dumps(rows, indent=2, ensure_ascii=False), file=out)
        return 0
    print(text_of(found, node), file=out)
    return 0


def text_of(found: list[tuple[AttemptRecord, list[LogLine]]], node: int | None) -> str:
    """The lines as ``spotline logs`` prints them: a header per attempt."""
    text = []
    for record, lines in found:
        text.append(_header(record, node))
        text += [_text(record, line) for line in lines]
    return "\n".join(text)


def follow(
    source: Source,
    jobs: FirestoreStore,
    job_id: str,
    attempt: int | None,
    node: int | None,
    out: IO[str],
) -> JobDoc | None:
    """Print the lines as they come, into each new attempt, until the job has
    ended and the last of its lines are in; the job as it ended. The job is
    read again before each round of lines, so the round after it ended still
    reads everything its VMs wrote. A job not
    recorded yet (just published) is waited for; one deleted while followed
    (from the console) ends the follow with None: no event will ever end it."""
    from spotline.shared.domain.states import JobStatus

    headed: set[int] = set()
    ended_at: float | None = None
    seen = False
    while True:
        job = jobs.get_job(job_id)
        if job is None and seen:
            print(f"job {job_id} no longer exists: it was deleted while followed", file=out)
            return None
        if job is None:
            time.sleep(source.poll_s)
            continue
        seen = True
        if job.status in JobStatus.terminal() and ended_at is None:
            # A job that ended long ago has nothing on its way.
            ago = (datetime.now(UTC) - job.updated_at).total_seconds() if job.updated_at else 0
            ended_at = time.monotonic() - max(ago, 0.0)
        for record in job.attempts:
            if attempt not in (None, record.attempt):
                continue
            lines = source.new_lines(job.job_id, record, node)
            if record.attempt not in headed and (lines or record.ended_at is None):
                print(_header(record, node), file=out)
                headed.add(record.attempt)
            for line in lines:
                print(_text(record, line), file=out)
        out.flush()
        if ended_at is not None and time.monotonic() - ended_at >= source.settle_s:
            return job
        time.sleep(source.poll_s)


def _header(record: AttemptRecord, node: int | None) -> str:
    where = record.instance if node is None else node_instance(record, node)
    nodes = f" (node {node})" if node is not None else ""
    if node is None and record.nodes > 1:
        nodes = f" and {record.nodes - 1} more nodes"
    return f"== attempt {record.attempt} on {where}{nodes} ({record.outcome or 'running'})"


def _text(record: AttemptRecord, line: LogLine) -> str:
    """A line as printed: a gang's lines say which node wrote them."""
    return f"[node {line.node}] {line.message}" if record.nodes > 1 else line.message
