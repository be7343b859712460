"""``spotline logs``: a job's output, attempt by attempt and node by node, once
or followed (``--follow``) until the job ends.

Where the lines come from is log_sources.py: the local VMs' files, or Cloud
Logging in the cloud.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING

from spotline.infra.cli.connect import job_of
from spotline.infra.cli.log_sources import CloudSource, LocalSource, LogLine, Source, node_instance
from spotline.infra.cli.watch import exit_code
from spotline.shared.domain.documents import AttemptRecord, JobDoc

if TYPE_CHECKING:
    from spotline.shared.adapters.firestore_store import FirestoreStore


def logs(args: argparse.Namespace) -> int:
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError

    from spotline.infra.localstack.stack import read_stack_workdir

    settings, job = job_of(args)
    if args.node is not None and not 0 <= args.node < job.spec.nodes:
        print(f"job {job.job_id} has no node {args.node}: nodes 0 to {job.spec.nodes - 1}")
        return 2
    source: Source = (
        LocalSource(read_stack_workdir(args.workdir) / "vms")
        if settings.compute_endpoint
        else CloudSource(settings.project)
    )
    try:
        if args.follow:
            from spotline.shared.adapters.firestore_store import FirestoreStore

            jobs = FirestoreStore(settings.project)
            return follow(source, jobs, job.job_id, args.attempt, args.node, sys.stdout)
        return show(source, job, args.attempt, args.node, args.json, sys.stdout)
    except (GoogleAPIError, GoogleAuthError) as err:  # no credentials, no right, down
        reason = " ".join(str(err).split())
        query = next((a.logs_query for a in job.attempts if a.logs_query), "")
        print(
            f"cannot read Cloud Logging: {reason}\n  try: gcloud logging read "
            f"'{query}' --project {settings.project}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        return 130


def show(
    source: Source, job: JobDoc, attempt: int | None, node: int | None, as_json: bool, out: IO[str]
) -> int:
    """Print the lines of the job's attempts (or of one), node by node."""
    attempts = [a for a in job.attempts if attempt in (None, a.attempt)]
    if not attempts:
        print(f"job {job.job_id} has no attempt {attempt or ''} with a VM yet", file=sys.stderr)
        return 1
    shown: list[LogLine] = []
    for record in attempts:
        lines = sorted(source.new_lines(job.job_id, record, node), key=lambda line: line.node)
        if as_json:
            shown += lines
            continue
        print(_header(record, node), file=out)
        for line in lines:
            print(_text(record, line), file=out)
    if as_json:
        rows = [line.to_json() for line in shown]
        print(json.dumps(rows, indent=2, ensure_ascii=False), file=out)
    return 0


def follow(
    source: Source,
    jobs: FirestoreStore,
    job_id: str,
    attempt: int | None,
    node: int | None,
    out: IO[str],
) -> int:
    """Print the lines as they come, into each new attempt, until the job has
    ended and the last of its lines are in; the exit code is ``watch``'s (0
    for COMPLETED). The job is read again before each round of lines, so the
    round after it ended still reads everything its VMs wrote. A job not
    recorded yet (just published) is waited for; one deleted while followed
    (from the console) ends the follow with 1: no event will ever end it."""
    from spotline.shared.domain.states import JobStatus

    headed: set[int] = set()
    ended_at: float | None = None
    seen = False
    while True:
        job = jobs.get_job(job_id)
        if job is None and seen:
            print(f"job {job_id} no longer exists: it was deleted while followed", file=out)
            return 1
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
            return exit_code([job])
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
