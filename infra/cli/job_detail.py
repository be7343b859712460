"""``spotline status JOB`` for a person: what the job is, where its checkpoints
and logs are, the spec it was submitted with, and its timeline."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from spotline.infra.cli.job_fields import (
    age,
    display_spec,
    duration,
    failure_counts,
    resizes_of,
    short_span,
)
from spotline.infra.cli.report import timeline
from spotline.shared.domain.documents import EpochDoc, JobDoc


def detail_text(
    job: JobDoc,
    epochs: Sequence[EpochDoc],
    checkpoint_dir: str,
    project: str,
    local: bool,
    now: datetime,
) -> str:
    """``local``: the job ran on the local stack, whose VMs log to files."""
    saved = "" if job.savings_percent is None else f", saved {job.savings_percent:.0f}%"
    where = " ".join(
        part
        for part in (
            job.machine_id or "no machine yet",
            f"on {job.instance}" if job.instance else "",
            f"in {job.zone}" if job.zone else "",
        )
        if part
    )
    lines = [
        f"job          {job.job_id} of {job.user}"
        + (f": {job.description}" if job.description else ""),
        f"status       {job.status}/{job.substatus}, progress {job.progress}, "
        f"attempt {job.attempt}, preemptions {job.preemptions}{resizes_of(job)}",
        f"restarts     {failure_counts(job)}",
        f"submitted    {job.created_at:%Y-%m-%d %H:%M:%S} UTC ({age(job.created_at, now)}), "
        f"duration {short_span(duration(job, now))}",
        f"machine      {where}",
        f"cost         {job.cost_usd:.4f} USD (on demand {job.on_demand_cost_usd:.4f}{saved})",
        f"checkpoints  {checkpoint_dir}"
        + (f" (last: {job.checkpoint_uri})" if job.checkpoint_uri else " (none saved yet)"),
    ]
    if job.record is not None:
        kept = [
            f"{what} {uri}"
            for what, uri in (("code", job.record.code_uri), ("data", job.record.data_uri))
            if uri
        ]
        lines.append(f"recorded     {', '.join(kept) or 'nothing (no code_uri or data_uri)'}")
    if job.metrics:
        metrics = " ".join(
            f"{name}={'nan' if value is None else format(value, '.4g')}"
            for name, value in sorted(job.metrics.items())
        )
        lines.append(f"metrics      {metrics}")
    lines.append(f"logs         spotline logs {job.job_id}")
    if not local:
        lines += [
            f"             attempt {a.attempt}: gcloud logging read '{a.logs_query}' "
            f"--project {project}"
            for a in job.attempts
            if a.logs_query
        ]
    lines += [
        f"             attempt {a.attempt}: node {r.rank} {r.lost} replaced by {r.replacement}"
        + (f" (instance id {r.instance_id})" if r.instance_id else "")
        for a in job.attempts
        for r in a.replaced_nodes
    ]
    if job.error:
        lines.append(f"error        {job.error}")
    if job.nothing_saved:
        lines.append(f"nothing saved  {job.nothing_saved}")
    spec = json.dumps(display_spec(job.spec, defaults=False), indent=2, ensure_ascii=False)
    lines += ["", "spec (as submitted; --json shows every field):"]
    lines += [f"  {line}" for line in spec.splitlines()]
    return "\n".join([*lines, "", timeline(job, epochs)])
