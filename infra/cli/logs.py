"""``spotline logs``: a job's output, attempt by attempt."""

from __future__ import annotations

import argparse
import json
import sys

from infra.cli.connect import job_of


def logs(args: argparse.Namespace) -> int:
    from infra.localstack.stack import read_stack_workdir

    settings, job = job_of(args)
    vms = read_stack_workdir(args.workdir) / "vms" if settings.compute_endpoint else None
    attempts = [a for a in job.attempts if args.attempt in (None, a.attempt)]
    if not attempts:
        print(f"job {args.job} has no attempt {args.attempt or ''} with a VM yet", file=sys.stderr)
        return 1
    for attempt in attempts:
        print(
            f"== attempt {attempt.attempt} on {attempt.instance} ({attempt.outcome or 'running'})"
        )
        local = vms / f"{attempt.instance}.log" if vms else None
        if local is not None and local.exists():
            print(_messages(local.read_text(errors="replace"), job.job_id, attempt.attempt))
        else:
            print(f"  gcloud logging read '{attempt.logs_query}' --project {settings.project}")
    return 0


def _messages(text: str, job_id: str, attempt: int) -> str:
    """The messages of one job attempt's lines (a cooling VM runs several jobs)."""
    shown = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            shown.append(line)
            continue
        if not isinstance(record, dict):
            shown.append(line)
        elif record.get("job_id", job_id) == job_id and record.get("attempt", attempt) == attempt:
            shown.append(str(record.get("message", line)))
    return "\n".join(shown)
