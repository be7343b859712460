"""``spotline logs``: a job's output, attempt by attempt.

Locally each VM is a process whose output is a file in the stack's workdir; in
the cloud the VM's logging agent sends its lines to Cloud Logging, read here
through google-cloud-logging with the query each attempt records (its VM's
instance id, the job and the attempt), so the logs outlive the VM.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from infra.cli.connect import job_of
from shared.domain.documents import AttemptRecord

# Lines before the attempt's start (clock skew between the VM and Firestore)
# are still its own.
_SKEW = timedelta(minutes=5)
_PAGE_SIZE = 1000


@dataclass(frozen=True)
class LogLine:
    attempt: int
    instance: str
    at: datetime | None  # None: a line with no time (not one of the agent's records)
    message: str

    def to_json(self) -> dict[str, Any]:
        at = None if self.at is None else self.at.isoformat()
        return {
            "attempt": self.attempt,
            "instance": self.instance,
            "at": at,
            "message": self.message,
        }


def logs(args: argparse.Namespace) -> int:
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError

    from infra.localstack.stack import read_stack_workdir

    settings, job = job_of(args)
    vms = read_stack_workdir(args.workdir) / "vms" if settings.compute_endpoint else None
    attempts = [a for a in job.attempts if args.attempt in (None, a.attempt)]
    if not attempts:
        print(f"job {args.job} has no attempt {args.attempt or ''} with a VM yet", file=sys.stderr)
        return 1
    shown: list[LogLine] = []
    for attempt in attempts:
        if vms is None:
            try:
                lines = list(cloud_lines(settings.project, attempt))
            except (GoogleAPIError, GoogleAuthError) as err:  # no credentials, no right, down
                reason = " ".join(str(err).split())
                print(
                    f"cannot read Cloud Logging: {reason}\n  try: gcloud logging read "
                    f"'{attempt.logs_query}' --project {settings.project}",
                    file=sys.stderr,
                )
                return 1
        else:
            local = vms / f"{attempt.instance}.log"
            text = local.read_text(errors="replace") if local.exists() else ""
            lines = list(file_lines(text, job.job_id, attempt))
        if args.json:
            shown += lines
            continue
        print(
            f"== attempt {attempt.attempt} on {attempt.instance} ({attempt.outcome or 'running'})"
        )
        for line in lines:
            print(line.message)
    if args.json:
        print(json.dumps([line.to_json() for line in shown], indent=2, ensure_ascii=False))
    return 0


def file_lines(text: str, job_id: str, attempt: AttemptRecord) -> Iterator[LogLine]:
    """One job attempt's lines of a local VM's output (a cooling VM runs several
    jobs): the agent's JSON records of it, and every line that is not one."""
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            yield LogLine(attempt.attempt, attempt.instance, None, line)
        elif (
            record.get("job_id", job_id) == job_id
            and record.get("attempt", attempt.attempt) == attempt.attempt
        ):
            yield LogLine(
                attempt.attempt,
                attempt.instance,
                _time(record.get("time")),
                str(record.get("message", line)),
            )


def _time(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def cloud_lines(project: str, attempt: AttemptRecord) -> Iterator[LogLine]:
    """The attempt's entries in Cloud Logging, oldest first.

    The filter is bounded by the attempt's start: without a timestamp term the
    client library adds "the last 24 hours", and an older job's logs would
    look empty.
    """
    from google.cloud import logging

    from infra.deploy.endpoints import Endpoints, client_options

    if not attempt.logs_query:
        return
    since = (attempt.started_at - _SKEW).strftime("%Y-%m-%dT%H:%M:%SZ")
    client = logging.Client(
        project=project,
        _use_grpc=False,  # REST: the same requests against Google or a local double
        **client_options(Endpoints.from_env().logging, None),
    )
    entries = client.list_entries(
        resource_names=[f"projects/{project}"],
        filter_=f'({attempt.logs_query}) AND timestamp>="{since}"',
        order_by=logging.ASCENDING,
        page_size=_PAGE_SIZE,
    )
    for entry in entries:
        payload = entry.payload
        message = (
            payload.get("message", json.dumps(payload)) if isinstance(payload, dict) else payload
        )
        yield LogLine(attempt.attempt, attempt.instance, entry.timestamp, str(message))
