"""The tables of jobs, epochs, machines and settings (the jobs table as an
experiment summary), laid out by ``spotline.infra.cli.tables``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from spotline.infra.cli.tables import table, text_table
from spotline.infra.client.records import MachineOffer
from spotline.shared.domain.documents import EpochDoc, JobDoc
from spotline.shared.domain.secret_env import masked_env

if TYPE_CHECKING:
    from spotline.shared.settings import Loaded


def _metrics(metrics: dict[str, float | None]) -> str:
    return " ".join(f"{name}={_number(value, '.4g')}" for name, value in sorted(metrics.items()))


def _number(value: float | None, spec: str) -> str:
    """A metric; None is one the trainer reported as not a finite number."""
    return "nan" if value is None else format(value, spec)


def jobs_table(jobs: Sequence[JobDoc]) -> str:
    headers = [
        "JOB",
        "USER",
        "STATUS",
        "SUBSTATUS",
        "PROGRESS",
        "ATTEMPT",
        "MACHINE",
        "INSTANCE",
        "COST_USD",
        "ON_DEMAND_USD",
        "SPOT_SAVING",
        "METRICS",
        "DESCRIPTION",
    ]
    rows = [
        [
            job.job_id,
            job.user,
            job.status,
            job.substatus,
            job.progress,
            job.attempt,
            job.machine_id,
            job.instance,
            f"{job.cost_usd:.4f}",
            f"{job.on_demand_cost_usd:.4f}",
            "" if job.savings_percent is None else f"{job.savings_percent:.0f}%",
            _metrics(job.metrics),
            job.description[:40],
        ]
        for job in sorted(jobs, key=lambda j: j.created_at)
    ]
    return text_table(headers, rows, right={"ATTEMPT", "COST_USD", "ON_DEMAND_USD", "SPOT_SAVING"})


def machines_table(rows: Sequence[MachineOffer], quotas_read: bool = True) -> Table:
    """The catalog with prices, capacity and quotas.

    CAPACITY is ``?`` when the quotas could not be read, ``-`` when none of a
    machine's quotas is known.
    """
    headers = [
        "MACHINE_ID",
        "GPUS",
        "VCPUS",
        "USD_PER_HOUR",
        "CAPACITY",
        "IN_USE",
        "AVAILABILITY_24H",
    ]
    lines = []
    for row in rows:
        room = "?" if not quotas_read else "-" if row.capacity is None else row.capacity
        gpus = f"{row.gpu_count}x{row.gpu_type}" if row.gpu_type else "-"
        tried = row.requests_24h
        rate = "-" if not tried else f"{100 * row.successes_24h / tried:.0f}% of {tried}"
        lines.append(
            [row.machine_id, gpus, row.vcpus, f"{row.usd_per_hour:.3f}", room, row.in_use, rate]
        )
    return table(headers, lines, right={"VCPUS", "USD_PER_HOUR", "CAPACITY", "IN_USE"})


def machine_json(row: MachineOffer) -> dict[str, object]:
    """One row of ``spotline machines --json``; ``capacity`` null: unknown."""
    return dataclasses.asdict(row)


def job_detail(job: JobDoc, epochs: Sequence[EpochDoc]) -> str:
    return "\n".join([jobs_table([job]), "", timeline(job, epochs)])


def timeline(job: JobDoc, epochs: Sequence[EpochDoc]) -> str:
    """The job's history, error, attempts and epochs, as text."""
    parts = ["history:"]
    start = job.history[0].at if job.history else job.created_at
    for entry in job.history:
        offset = (entry.at - start).total_seconds()
        note = f"  ({entry.note})" if entry.note else ""
        parts.append(
            f"  +{offset:7.2f}s  attempt {entry.attempt}  {entry.status}/{entry.substatus}{note}"
        )
    if job.error:
        parts += ["", f"error: {job.error}"]
    if job.spec.env:
        # Secret-like values never shown (a job stored before admission
        # refused them may hold one); Secret Manager references are.
        shown = masked_env(job.spec.env)
        parts += ["", "env:", *(f"  {name}={value}" for name, value in sorted(shown.items()))]
    if job.attempts:
        rows = [
            [
                a.attempt,
                a.instance,
                a.machine_id,
                a.zone,
                a.outcome or "running",
                a.resumed_from_step,
                a.checkpoint_step,
                f"{a.cost_usd:.6f}",
            ]
            for a in job.attempts
        ]
        headers = [
            "ATTEMPT",
            "INSTANCE",
            "MACHINE",
            "ZONE",
            "OUTCOME",
            "RESUMED_FROM_STEP",
            "SAVED_AT_STEP",
            "COST_USD",
        ]
        numbers = {"ATTEMPT", "RESUMED_FROM_STEP", "SAVED_AT_STEP", "COST_USD"}
        parts += ["", "attempts:", text_table(headers, rows, right=numbers)]
    if epochs:
        names = sorted({name for epoch in epochs for name in epoch.metrics})
        rows = [
            [
                e.epoch,
                e.attempt,
                e.step,
                *(_number(e.metrics.get(n), ".4f") for n in names),
                e.instance,
            ]
            for e in epochs
        ]
        headers = ["EPOCH", "ATTEMPT", "STEP", *names, "INSTANCE"]
        parts += ["", "epochs:", text_table(headers, rows, right=set(headers[:-1]))]
    return "\n".join(parts)


def settings_table(loaded: Loaded) -> Table:
    """Every setting: name, variable, value, where it came from, what it does."""
    rows = [[*row[:2], row[2] or "-", *row[3:]] for row in settings_rows(loaded)]
    return table(["SETTING", "VARIABLE", "VALUE", "FROM", "DESCRIPTION"], rows)


def settings_rows(loaded: Loaded) -> list[list[str]]:
    """Each setting's name, variable, value ("" when unset), where it came
    from and what it does."""
    from spotline.shared.settings import Settings, variables

    env = loaded.settings.to_env()
    rows = []
    for name, field in Settings.model_fields.items():
        value = env.get(variables(name)[0], "")
        origin: str = loaded.origins[name]
        source = loaded.sources.get(name, "")
        if origin == "env" and source != variables(name)[0]:
            origin = f"env {source}"  # read under another name (GOOGLE_CLOUD_PROJECT)
        rows.append([name, variables(name)[0], value, origin, field.description or ""])
    return rows
