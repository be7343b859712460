"""The commands that read what spotline holds: ``status``, ``rejected``, ``machines``."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from infra.cli.connect import connect

if TYPE_CHECKING:
    from shared.domain.vms import Quota
    from shared.settings import Settings


def status(args: argparse.Namespace) -> int:
    from infra.cli.report import job_detail, jobs_table
    from shared.adapters.firestore_store import FirestoreStore

    store = FirestoreStore(connect(args.workdir).project)
    if args.job:
        job = store.get_job(args.job)
        if job is None:
            print(f"no job {args.job}", file=sys.stderr)
            return 1
        print(job_detail(job, store.list_epochs(job.job_id)))
    else:
        print(jobs_table(store.list_jobs()))
    return 0


def rejected(args: argparse.Namespace) -> int:
    from infra.cli.report import table
    from shared.adapters.firestore_store import FirestoreStore

    rejections = FirestoreStore(connect(args.workdir).project).recent_rejections(args.limit)
    rows = [[r.message_id, f"{r.at:%Y-%m-%d %H:%M:%S}", r.reason] for r in rejections]
    print(table(["MESSAGE", "AT", "REASON"], rows))
    return 0


def machines(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from infra.cli.report import MachineRow, machines_table
    from shared.adapters.firestore_store import FirestoreStore
    from shared.domain.capacity import capacity
    from shared.domain.catalog import load_catalog
    from shared.domain.states import InstanceStatus
    from shared.domain.vms import Provisioning

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
                    machine_id, machine, price, room, live.count(machine_id), requests, successes
                )
            )
    print(machines_table(rows, quotas_read=quotas is not None))
    return 0


def _region_quotas(settings: Settings) -> dict[str, Quota] | None:
    """The region's quotas through the settings' compute adapter, or None (and
    why, on stderr) when they cannot be read."""
    from google.auth.exceptions import GoogleAuthError

    from functions.deps import build_compute
    from shared.domain.errors import SpotlineError

    region = settings.region
    try:
        return build_compute(settings).region_quotas(region)
    except (SpotlineError, GoogleAuthError) as err:  # no credentials, no permission, down
        reason = " ".join(str(err).split())
        print(f"CAPACITY unknown: cannot read the quotas of {region}: {reason}", file=sys.stderr)
        return None
