"""The commands that read what spotline holds: ``status``, ``rejected``, ``machines``."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from spotline.infra.cli.connect import connect

if TYPE_CHECKING:
    from datetime import datetime

    from spotline.shared.adapters.firestore_store import FirestoreStore
    from spotline.shared.domain.vms import Quota
    from spotline.shared.settings import Settings


def status(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from spotline.shared.adapters.firestore_store import FirestoreStore

    settings = connect(args.workdir)
    store = FirestoreStore(settings.project)
    now = datetime.now(UTC)
    if args.job:
        return _one_job(args, settings, store, now)
    from spotline.infra.cli.job_fields import summary
    from spotline.infra.cli.jobs_table import print_jobs
    from spotline.infra.cli.output import console, print_json
    from spotline.shared.domain.states import JobStatus

    statuses = JobStatus.active() if args.active else None
    jobs = store.recent_jobs(args.limit, user=args.user, statuses=statuses)
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


def _one_job(
    args: argparse.Namespace, settings: Settings, store: FirestoreStore, now: datetime
) -> int:
    from spotline.infra.cli.job_detail import detail_text
    from spotline.infra.cli.job_fields import detail
    from spotline.infra.cli.output import print_json

    job = store.get_job(args.job)
    if job is None:
        print(f"no job {args.job} (`spotline status` lists them)", file=sys.stderr)
        return 1
    epochs = store.list_epochs(job.job_id)
    checkpoints = f"{settings.job_prefix(job.job_id)}/checkpoints"
    if args.json:
        print_json(detail(job, epochs, checkpoints, now))
    else:
        local = bool(settings.compute_endpoint)
        print(detail_text(job, epochs, checkpoints, settings.project, local, now))
    return 0


def rejected(args: argparse.Namespace) -> int:
    from spotline.infra.cli.report import table
    from spotline.shared.adapters.firestore_store import FirestoreStore

    rejections = FirestoreStore(connect(args.workdir).project).recent_rejections(args.limit)
    if args.json:
        from spotline.infra.cli.output import print_json

        print_json([r.model_dump(mode="json") for r in rejections])
        return 0
    rows = [[r.message_id, f"{r.at:%Y-%m-%d %H:%M:%S}", r.reason] for r in rejections]
    print(table(["MESSAGE", "AT", "REASON"], rows))
    return 0


def machines(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from spotline.infra.cli.report import MachineRow, machine_json, machines_table
    from spotline.shared.adapters.firestore_store import FirestoreStore
    from spotline.shared.domain.capacity import capacity
    from spotline.shared.domain.catalog import load_catalog, shipped_prices
    from spotline.shared.domain.states import InstanceStatus
    from spotline.shared.domain.vms import Provisioning

    if args.refresh_prices:
        return refresh_prices(args)
    settings = connect(args.workdir)
    store = FirestoreStore(settings.project)
    quotas = _region_quotas(settings)
    since = datetime.now(UTC) - timedelta(hours=24)
    live = [i.machine_id for i in store.list_instances(InstanceStatus.live())]
    rows = []
    for machine in load_catalog().values():
        for machine_id, provisioning, price in (
            (machine.machine_id, Provisioning.SPOT, machine.spot_usd_per_hour),
            (f"{machine.machine_id}.od", Provisioning.STANDARD, machine.on_demand_usd_per_hour),
        ):
            room = None if quotas is None else capacity(machine, provisioning, quotas)
            requests, successes = store.availability(machine_id, since)
            rows.append(
                MachineRow(
                    machine_id,
                    machine,
                    price,
                    room,
                    live.count(machine_id),
                    requests,
                    successes,
                    provisioning,
                )
            )
    if args.json:
        from spotline.infra.cli.output import print_json

        print_json([machine_json(row) for row in rows])
    else:
        print(machines_table(rows, quotas_read=quotas is not None))
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
        return 1
    print(
        f"{path}: {len(book.components)} rates of {book.region} as of {book.priced_at}, "
        f"from {book.source}"
    )
    return 0


def _region_quotas(settings: Settings) -> dict[str, Quota] | None:
    """The region's quotas through the settings' compute adapter, or None (and
    why, on stderr) when they cannot be read."""
    from google.auth.exceptions import GoogleAuthError

    from spotline.functions.deps import build_compute
    from spotline.shared.domain.errors import SpotlineError

    region = settings.region
    try:
        return build_compute(settings).region_quotas(region)
    except (SpotlineError, GoogleAuthError) as err:  # no credentials, no permission, down
        reason = " ".join(str(err).split())
        print(f"CAPACITY unknown: cannot read the quotas of {region}: {reason}", file=sys.stderr)
        return None


def timeline(args: argparse.Namespace) -> int:
    """``spotline timeline JOB``: where its time went (``spotline.infra.cli.timeline``)."""
    from spotline.infra.cli import timeline as view
    from spotline.shared.adapters.firestore_store import FirestoreStore

    job = FirestoreStore(connect(args.workdir).project).get_job(args.job)
    if job is None:
        print(f"no job {args.job} (`spotline status` lists them)", file=sys.stderr)
        return 1
    return view.show(args, job)


def watch(args: argparse.Namespace) -> int:
    """``spotline watch [JOB ...]``: live, through Firestore listeners."""
    from spotline.infra.cli.watch import run_watch
    from spotline.shared.adapters.firestore_store import FirestoreStore

    return run_watch(args, FirestoreStore(connect(args.workdir).project))
