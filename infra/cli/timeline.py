"""``spotline timeline JOB``: where a job's time went, per attempt and in
total, as a table, JSON, or pie and funnel charts (a PNG)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotline.infra.cli.exit_codes import Exit

# Under the workdir: charts drawn without -o.
CHARTS_FOLDER = "charts"

if TYPE_CHECKING:
    from spotline.infra.client.job import Job
    from spotline.shared.domain.documents import JobDoc
    from spotline.shared.domain.timeline import Timeline


def add_parser(sub: Any, run: Any) -> None:
    """The ``timeline`` subcommand; ``run(args, job)`` is how the CLI finds the job."""
    parser = sub.add_parser("timeline", help="where a job's time went, per phase and attempt")
    parser.add_argument("job", help="the job")
    parser.add_argument(
        "--chart", choices=("pie", "funnel"), help="also draw a chart (needs matplotlib)"
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help="the chart's PNG (default: charts/JOB-timeline-CHART.png under the workdir, "
        "$SPOTLINE_WORKDIR or .spotline)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(run=run)


def show(args: argparse.Namespace, job: Job) -> int:
    from spotline.infra.client.charts import ChartsUnavailable, draw

    found = job.timeline()
    doc = job.doc
    assert doc is not None
    if args.json:
        print(json.dumps(as_json(doc, found), indent=2))
    else:
        print(table(doc, found))
    if args.chart:
        path = args.output or default_chart_path(job.connection.workdir, doc.job_id, args.chart)
        path.parent.mkdir(parents=True, exist_ok=True)
        title = f"{doc.job_id}: {doc.status}, {len(found.by_attempt())} attempt(s)"
        try:
            draw(found, args.chart, title, path)
        except ChartsUnavailable as err:
            print(f"spotline timeline: {err}")
            return Exit.USAGE
        # On stderr under --json: the script reading stdout gets JSON only.
        print(f"chart: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def default_chart_path(workdir: Path, job_id: str, chart: str) -> Path:
    """Where a chart goes without ``-o``: the workdir's ``charts/``, not the working folder."""
    return workdir / CHARTS_FOLDER / f"{job_id}-timeline-{chart}.png"


def table(job: JobDoc, found: Timeline) -> str:
    """One row per phase, a column per attempt, then the total and its share."""
    from spotline.infra.cli.tables import text_table
    from spotline.infra.client.charts import duration
    from spotline.shared.domain.timeline import Phase

    attempts = found.by_attempt(grouped=True)
    totals = found.totals()
    total = found.seconds or 1.0
    headers = ["PHASE", *(f"ATTEMPT {n}" for n in attempts), "TOTAL", "SHARE"]
    rows = []
    for phase in Phase:
        if phase not in totals:
            continue
        in_attempts = [attempts[n].get(phase) for n in attempts]
        spent = totals.get(phase, 0.0)
        cells = ["-" if s is None else duration(s) for s in in_attempts]
        rows.append([phase.value, *cells, duration(spent), f"{spent / total:.0%}"])
    ongoing = " (so far)" if any(s.ongoing for s in found.segments) else ""
    summary = (
        f"job {job.job_id}: {job.status}, {duration(found.seconds)}{ongoing}, "
        f"{len(attempts)} attempt(s), {job.preemptions} preemption(s)"
        + (f", {job.resizes} resize(s)" if job.resizes else "")
    )
    return "\n".join([summary, text_table(headers, rows, right=set(headers[1:]))])


def as_json(job: JobDoc, found: Timeline) -> dict[str, object]:
    return {
        "job_id": job.job_id,
        "status": str(job.status),
        "seconds": round(found.seconds, 3),
        "totals": {p.key: round(s, 3) for p, s in found.totals().items()},
        "attempts": {
            str(n): {p.key: round(s, 3) for p, s in phases.items()}
            for n, phases in found.by_attempt().items()
        },
        "segments": [
            {
                "attempt": s.attempt,
                "phase": s.phase.key,
                "start": s.start.isoformat(),
                "seconds": round(s.seconds, 3),
                "ongoing": s.ongoing,
            }
            for s in found.segments
        ],
    }
