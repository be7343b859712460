"""``spotline watch [JOB ...]`` and ``submit --follow``: the jobs followed
live (``spotline.infra.client.watching``), until they end or Ctrl-C.

Watching named jobs ends when all of them have ended, with 0 if all
COMPLETED, 1 if any FAILED, 3 if any was CANCELED (2 is a usage error);
watching every active job goes on until Ctrl-C.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

from spotline.infra.cli.exit_codes import Exit

if TYPE_CHECKING:
    from spotline.shared.adapters.firestore_listen import JobFeed
    from spotline.shared.domain.documents import JobDoc


def add_parser(sub: Any, run: Any) -> None:
    parser = sub.add_parser(
        "watch", help="follow jobs live until they end (every active job: until Ctrl-C)"
    )
    parser.add_argument(
        "jobs", nargs="*", metavar="JOB", help="the jobs to follow (none: every active job)"
    )
    parser.set_defaults(run=run)


def exit_code(jobs: Sequence[JobDoc]) -> int:
    from spotline.shared.domain.states import JobStatus

    statuses = {job.status for job in jobs}
    if JobStatus.FAILED in statuses:
        return Exit.FAILED
    if JobStatus.CANCELED in statuses:
        return Exit.CANCELED
    return Exit.OK


def follow(
    feed: JobFeed,
    job_ids: Sequence[str],
    out: IO[str] | None = None,
    live: bool | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> int:
    """Show the feed's changes until every job of ``job_ids`` has ended (or,
    with none, until Ctrl-C). Returns the exit code."""
    from spotline.infra.client import watching

    try:
        return exit_code(watching.follow(feed, job_ids, out, live, clock))
    except KeyboardInterrupt:
        return 0


def run_watch(args: argparse.Namespace) -> int:
    """``spotline watch``: the named jobs until they end, or every active job."""
    from spotline.infra.client.connection import connect
    from spotline.shared.adapters.firestore_listen import JobFeed

    conn = connect(args.workdir)
    for job_id in args.jobs:
        conn.job_doc(job_id)  # JobNotFound: `main` says which
    with JobFeed(conn.store, args.jobs) as feed:
        return follow(feed, args.jobs)
