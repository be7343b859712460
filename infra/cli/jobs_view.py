"""The commands that read what spotline holds: ``status``, ``rejected``,
``machines``, ``timeline`` and ``watch``, over the API (``spotline.infra.client``)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from spotline.infra.cli.exit_codes import Exit
from spotline.infra.client.connection import connect

if TYPE_CHECKING:
    from datetime import datetime

    from spotline.infra.client.connection import Connection


def status(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    conn = connect(args.workdir)
    now = datetime.now(UTC)
    if args.job:
        return _one_job(args, conn, now)
    from spotline.infra.cli.job_fields import summary
    from spotline.infra.cli.jobs_table import print_jobs
    from spotline.infra.cli.output import console, print_json
    from spotline.infra.client.listing import recent_jobs

    jobs = recent_jobs(conn, args.limit, args.user, args.active)
    if args.json:
        print_json([summary(job, now) for job in jobs])
        return 0
    if not jobs:
        print("no jobs" + (" matching the filters" if args.user or args.active else ""))
        return 0
    print_jobs(console(), jobs, now)
    if len(jobs) == args.limit:
        # On stderr: a pipe gets the table alone.
        print(f"(the newest {args.limit}; --limit N shows more)", file=sys.stderr)
    return 0


def _one_job(args: argparse.Namespace, conn: Connection, now: datetime) -> int:
    from spotline.infra.cli.job_detail import detail_text
    from spotline.infra.cli.job_fields import detail
    from spotline.infra.cli.output import print_json

    settings = conn.settings
    job = conn.job_doc(args.job)
    epochs = conn.store.list_epochs(job.job_id)
    checkpoints = f"{settings.job_prefix(job.job_id, job.user)}/checkpoints"
    if args.json:
        print_json(detail(job, epochs, checkpoints, now))
    else:
        local = bool(settings.compute_endpoint)
        print(detail_text(job, epochs, checkpoints, settings.project, local, now))
    return 0


def rejected(args: argparse.Namespace) -> int:
    from spotline.infra.cli.tables import show, table

    rejections = connect(args.workdir).store.recent_rejections(args.limit)
    if args.json:
        from spotline.infra.cli.output import print_json

        print_json([r.model_dump(mode="json") for r in rejections])
        return 0
    rows = [[r.message_id, f"{r.at:%Y-%m-%d %H:%M:%S}", r.reason] for r in rejections]
    show(table(["MESSAGE", "AT", "REASON"], rows))
    return 0


def machines(args: argparse.Namespace) -> int:
    from spotline.infra.cli.report import machine_json, machines_table
    from spotline.infra.cli.tables import show
    from spotline.infra.client.listing import machine_offers
    from spotline.shared.domain.catalog import shipped_prices

    if args.refresh_prices:
        return refresh_prices(args)
    rows, unknown = machine_offers(connect(args.workdir))
    if unknown:
        print(f"CAPACITY unknown: {unknown}", file=sys.stderr)
    if args.json:
        from spotline.infra.cli.output import print_json

        print_json([machine_json(row) for row in rows])
    else:
        show(machines_table(rows, quotas_read=unknown is None))
        book = shipped_prices()
        print(f"prices of {book.region} as of {book.priced_at} (source: {book.source})")
    return 0


def refresh_prices(args: argparse.Namespace) -> int:
    """``machines --refresh-prices``: the price file from the Billing Catalog API."""
    from datetime import UTC, datetime
    from pathlib import Path

    from google.api_core.exceptions import GoogleAPIError

    from spotline.infra.cli.prices import refresh, shipped_price_file
    from spotline.shared.domain.sku_prices import PriceError
    from spotline.shared.settings import Settings

    path = Path(args.prices_file) if args.prices_file else shipped_price_file()
    region = Settings.from_env().region
    try:
        book = refresh(path, region, args.billing_endpoint, datetime.now(UTC).date())
    except (PriceError, GoogleAPIError) as err:
        print(f"spotline: prices not refreshed, {path} kept: {err}", file=sys.stderr)
        return Exit.FAILED
    print(
        f"{path}: {len(book.components)} rates of {book.region} as of {book.priced_at}, "
        f"from {book.source}"
    )
    return 0


def timeline(args: argparse.Namespace) -> int:
    """``spotline timeline JOB``: where its time went (``spotline.infra.cli.timeline``)."""
    from spotline.infra.cli import timeline as view
    from spotline.infra.client.job import Job

    return view.show(args, Job(args.job, connection=connect(args.workdir)))


def watch(args: argparse.Namespace) -> int:
    """``spotline watch [JOB ...]``: live, through Firestore listeners."""
    from spotline.infra.cli.watch import run_watch

    return run_watch(args)
