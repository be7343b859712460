"""What the CLI shows of a job, as values: its age, how long it ran, the spec
with secret-looking values masked, and the JSON documents of ``--json``.

Pure (the caller passes ``now``), so a table and a JSON document show the same
numbers, and tests can pin the time.

The JSON keys are a contract with scripts (documented in docs/guides/submitting.md): keys are
only ever added, timestamps are ISO 8601 in UTC, absent values are ``null``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from spotline.shared.domain.documents import EpochDoc, JobDoc
from spotline.shared.domain.secret_env import masked_env
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobStatus


def display_spec(spec: JobSpec, defaults: bool = True) -> dict[str, Any]:
    """The spec as JSON values, each secret-looking env value masked: the one
    place the CLI turns a spec into something printed. ``defaults=False``
    leaves out the fields the user did not set."""
    shown = spec.model_dump(mode="json", exclude_none=True, exclude_defaults=not defaults)
    if "env" in shown:
        # The one list of secret-like names (spotline.shared.domain.secret_env); a
        # Secret Manager reference is shown, it is no secret.
        shown["env"] = masked_env(spec.env)
    return shown


def ended_at(job: JobDoc) -> datetime | None:
    """When the job reached its terminal status (None: still active)."""
    if job.status not in JobStatus.terminal():
        return None
    ends = [entry.at for entry in job.history if entry.status in JobStatus.terminal()]
    return ends[0] if ends else job.updated_at


def duration(job: JobDoc, now: datetime) -> timedelta:
    """From submission to the end, or to ``now`` for an active job."""
    return max((ended_at(job) or now) - job.created_at, timedelta(0))


def short_span(span: timedelta) -> str:
    """``45s``, ``12m05s``, ``3h07m``, ``2d04h``: two units at most."""
    seconds = int(span.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


def age(at: datetime, now: datetime) -> str:
    return f"{short_span(max(now - at, timedelta(0)))} ago"


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def failure_counts(job: JobDoc) -> str:
    """The failure policy's counters against their limits, in one line."""
    spec = job.spec
    line = (
        f"{job.restarts_on_errors} on errors (max_restarts_on_errors={spec.max_restarts_on_errors})"
    )
    if spec.restart_on_exit_codes or job.restarts_on_exit_codes:
        line += f", {job.restarts_on_exit_codes} on exit codes {spec.restart_on_exit_codes}"
    cap = f"max_preemptions={spec.max_preemptions}"
    if spec.max_preemptions is None:
        cap = "max_preemptions: no limit"
    return f"{line}; preemptions {job.preemptions} ({cap})"


def resizes_of(job: JobDoc) -> str:
    """``, resizes N (min_nodes=M)`` for an elastic gang; empty for another job."""
    if job.spec.min_nodes is None and not job.resizes:
        return ""
    return f", resizes {job.resizes} (min_nodes={job.spec.min_nodes})"


def summary(job: JobDoc, now: datetime) -> dict[str, Any]:
    """One job in ``spotline status --json``."""
    return {
        "job_id": job.job_id,
        "user": job.user,
        "description": job.description,
        "status": str(job.status),
        "substatus": str(job.substatus),
        "progress": job.progress,
        "epoch": job.epoch,
        "epochs": job.epochs,
        "attempt": job.attempt,
        "preemptions": job.preemptions,
        "resizes": job.resizes,
        "restarts_on_errors": job.restarts_on_errors,
        "restarts_on_exit_codes": job.restarts_on_exit_codes,
        "machine_id": job.machine_id,
        "instance": job.instance,
        "zone": job.zone,
        "metrics": dict(job.metrics),
        "cost_usd": job.cost_usd,
        "on_demand_cost_usd": job.on_demand_cost_usd,
        "savings_percent": job.savings_percent,
        "checkpoint_uri": job.checkpoint_uri,
        "error": job.error,
        "nothing_saved": job.nothing_saved,
        "created_at": _iso(job.created_at),
        "updated_at": _iso(job.updated_at),
        "ended_at": _iso(ended_at(job)),
        "duration_s": round(duration(job, now).total_seconds(), 3),
    }


def detail(
    job: JobDoc, epochs: Sequence[EpochDoc], checkpoint_dir: str, now: datetime
) -> dict[str, Any]:
    """One job in ``spotline status JOB --json``: the summary, the spec, where
    its checkpoints go, each attempt's log query, its timeline and epochs."""
    return {
        **summary(job, now),
        "spec": display_spec(job.spec),
        "checkpoint_dir": checkpoint_dir,
        "record": None if job.record is None else job.record.model_dump(mode="json"),
        "logs": [
            {"attempt": a.attempt, "instance": a.instance, "query": a.logs_query}
            for a in job.attempts
        ],
        "attempts": [a.model_dump(mode="json") for a in job.attempts],
        "history": [h.model_dump(mode="json") for h in job.history],
        "epochs": [e.model_dump(mode="json") for e in epochs],
    }
