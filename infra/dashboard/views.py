"""What the dashboard shows of a job, an instance, a history line and the
timeline, as plain values for the templates: the numbers formatted here, so
that the pages, their live fragments and the tests read the same text.

Pure: the caller passes ``now``. The templates escape every value (Jinja's
autoescape), so a value here may hold anything a user typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from spotline.infra.cli.job_fields import age, duration, failure_counts, short_span
from spotline.infra.client.charts import duration as phase_duration
from spotline.shared.domain import failure_policy
from spotline.shared.domain.documents import (
    AttemptRecord,
    EpochDoc,
    HistoryEntry,
    InstanceDoc,
    JobDoc,
)
from spotline.shared.domain.states import JobStatus
from spotline.shared.domain.timeline import Phase, timeline


def dollars(amount: float) -> str:
    """Four decimals: a local or short job costs fractions of a cent."""
    return f"${amount:.4f}"


def metrics_text(metrics: dict[str, float | None]) -> str:
    return " ".join(
        f"{name}={'nan' if value is None else format(value, '.4g')}"
        for name, value in sorted(metrics.items())
    )


@dataclass(frozen=True)
class JobRow:
    job_id: str
    user: str
    description: str
    status: str
    substatus: str
    epoch: int
    epochs: int
    cost: str
    on_demand_cost: str
    saved: str
    age: str
    duration: str
    preemptions: int
    attempt: int
    machine: str
    metrics: str
    error: str
    nothing_saved: str


def job_row(job: JobDoc, now: datetime) -> JobRow:
    return JobRow(
        job_id=job.job_id,
        user=job.user,
        description=job.description,
        status=str(job.status),
        substatus=str(job.substatus),
        # A <progress> past its max shows full; a resumed epoch may report more.
        epoch=min(job.epoch, job.epochs),
        epochs=job.epochs,
        cost=dollars(job.cost_usd),
        on_demand_cost=dollars(job.on_demand_cost_usd),
        saved="" if job.savings_percent is None else f"{job.savings_percent:.0f}%",
        age=age(job.created_at, now),
        duration=short_span(duration(job, now)),
        preemptions=job.preemptions,
        attempt=job.attempt,
        machine=" ".join(p for p in (job.machine_id, job.zone) if p),
        metrics=metrics_text(job.metrics),
        error=job.error or "",
        nothing_saved=job.nothing_saved or "",
    )


@dataclass(frozen=True)
class AttemptRow:
    attempt: int
    instance: str
    machine: str
    zone: str
    ended: str  # the history's STATUS/SUBSTATUS that ended it ("" while it runs)
    outcome: str
    resumed_from: str
    saved_at: str
    cost: str


@dataclass(frozen=True)
class JobDetail:
    """What a job's page shows beyond its row: the failure policy's counters
    and the limit that ended the job (as ``spotline status JOB``), each
    attempt, and where a recorded job's snapshot is."""

    restarts: str
    ended_by: str
    recorded: str
    attempts: list[AttemptRow]


def job_detail(job: JobDoc) -> JobDetail:
    endings = failure_policy.attempt_endings(job)
    rows = [_attempt_row(r, endings.get(r.attempt, "")) for r in job.attempts]
    # VMs made for it that no attempt recorded (it ended while one was placed).
    rows += [_attempt_row(r, "made, never recorded") for r in job.unrecorded_vms]
    return JobDetail(
        restarts=failure_counts(job),
        ended_by=failure_policy.ending_limit(job) or "",
        recorded=_recorded(job),
        attempts=rows,
    )


def _attempt_row(record: AttemptRecord, ended: str) -> AttemptRow:
    def step(value: int | None) -> str:
        return "" if value is None else str(value)

    instance = record.instance if record.nodes == 1 else f"{record.instance} (+{record.nodes - 1})"
    return AttemptRow(
        attempt=record.attempt,
        instance=instance,
        machine=record.machine_id,
        zone=record.zone,
        ended=ended,
        outcome=record.outcome or "",
        resumed_from=step(record.resumed_from_step),
        saved_at=step(record.checkpoint_step),
        cost=dollars(record.cost_usd),
    )


def _recorded(job: JobDoc) -> str:
    """As ``spotline status JOB`` says it: the snapshot's code and data folders."""
    if job.record is None:
        return ""
    kept = [
        f"{what} {uri}"
        for what, uri in (("code", job.record.code_uri), ("data", job.record.data_uri))
        if uri
    ]
    return ", ".join(kept) or "nothing (no code_uri or data_uri)"


@dataclass(frozen=True)
class InstanceRow:
    name: str
    job_id: str
    status: str
    machine: str
    zone: str
    provisioning: str
    price: str
    cost: str
    age: str


def instance_row(instance: InstanceDoc, now: datetime) -> InstanceRow:
    status = str(instance.status)
    if instance.substatus:
        status += f"/{instance.substatus}"
    return InstanceRow(
        name=instance.name,
        job_id=instance.job_id,
        status=status,
        machine=instance.machine_id,
        zone=instance.zone,
        provisioning=str(instance.provisioning),
        price=dollars(instance.price_per_hour),
        # As of the last write (the reaper's sweep or a move): the closed
        # segments and the cooling period so far.
        cost=dollars(instance.cost_usd + instance.cooling_cost_usd),
        age=age(instance.created_at, now),
    )


@dataclass(frozen=True)
class HistoryRow:
    at: str
    status: str
    substatus: str
    attempt: str
    note: str


def history_rows(history: Sequence[HistoryEntry]) -> list[HistoryRow]:
    return [
        HistoryRow(
            at=f"{entry.at:%Y-%m-%d %H:%M:%S}",
            status=entry.status,
            substatus=entry.substatus or "",
            attempt="" if entry.attempt is None else str(entry.attempt),
            note=entry.note,
        )
        for entry in history
    ]


@dataclass(frozen=True)
class EpochRow:
    attempt: int
    epoch: str
    step: int
    metrics: str
    at: str


def epoch_rows(epochs: Sequence[EpochDoc]) -> list[EpochRow]:
    return [
        EpochRow(
            e.attempt, f"{e.epoch}/{e.epochs}", e.step, metrics_text(e.metrics), f"{e.at:%H:%M:%S}"
        )
        for e in epochs
    ]


@dataclass(frozen=True)
class PhaseRow:
    phase: str
    attempts: list[str]  # one cell per attempt, "-" where it had none of it
    total: str
    share: str


@dataclass(frozen=True)
class TimelineView:
    attempts: list[int]
    rows: list[PhaseRow]
    total: str


def timeline_view(job: JobDoc, now: datetime) -> TimelineView:
    """The table of ``spotline timeline``: a row per phase, a column per
    attempt; an active job's current phase counts up to ``now``."""
    ended = job.status in JobStatus.terminal()
    found = timeline(job.history, None if ended else now)
    by_attempt = found.by_attempt(grouped=True)
    totals = found.totals()
    whole = found.seconds or 1.0
    rows = []
    for phase in Phase:
        if phase not in totals:
            continue
        cells = [by_attempt[n].get(phase) for n in by_attempt]
        rows.append(
            PhaseRow(
                phase=phase.value,
                attempts=["-" if s is None else phase_duration(s) for s in cells],
                total=phase_duration(totals[phase]),
                share=f"{totals[phase] / whole:.0%}",
            )
        )
    return TimelineView(list(by_attempt), rows, phase_duration(found.seconds))
