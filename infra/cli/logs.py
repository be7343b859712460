"""``spotline logs``: a job's output, attempt by attempt and node by node, once
or followed (``--follow``) until the job ends (``spotline.infra.client.logs``)."""

from __future__ import annotations

import argparse
import sys
from typing import IO, TYPE_CHECKING

from spotline.infra.cli.exit_codes import Exit
from spotline.infra.cli.watch import exit_code
from spotline.infra.client import logs as job_logs
from spotline.infra.client.connection import connect
from spotline.infra.client.errors import LogsUnreadable

if TYPE_CHECKING:
    from spotline.infra.client.log_sources import Source
    from spotline.shared.adapters.firestore_store import FirestoreStore


def logs(args: argparse.Namespace) -> int:
    conn = connect(args.workdir)
    job = conn.job_doc(args.job)
    if args.node is not None and not 0 <= args.node < job.spec.nodes:
        print(f"job {job.job_id} has no node {args.node}: nodes 0 to {job.spec.nodes - 1}")
        return Exit.USAGE
    source = job_logs.source_of(conn)
    try:
        with job_logs.cloud_logging_errors(conn, job):
            if args.follow:
                return follow(source, conn.store, job.job_id, args.attempt, args.node, sys.stdout)
            return job_logs.show(source, job, args.attempt, args.node, args.json, sys.stdout)
    except LogsUnreadable as err:
        print(
            f"{err}\n  try: gcloud logging read '{err.query}' --project {err.project}",
            file=sys.stderr,
        )
        return Exit.FAILED
    except KeyboardInterrupt:
        return Exit.INTERRUPTED


def follow(
    source: Source,
    jobs: FirestoreStore,
    job_id: str,
    attempt: int | None,
    node: int | None,
    out: IO[str],
) -> int:
    """``logs --follow``: the lines as they come until the job ends; the exit
    code is ``watch``'s (0 for COMPLETED), 1 for a job deleted while followed."""
    ended = job_logs.follow(source, jobs, job_id, attempt, node, out)
    return Exit.FAILED if ended is None else exit_code([ended])
