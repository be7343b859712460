"""What spotline holds, listed: the newest jobs (``spotline status``) and the
machine catalog with its prices and how each machine fared
(``spotline machines``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from spotline.infra.client.connection import Connection, connect
from spotline.infra.client.records import JobState, MachineOffer

if TYPE_CHECKING:
    from spotline.shared.domain.documents import JobDoc
    from spotline.shared.domain.vms import Quota


def recent_jobs(
    conn: Connection, limit: int = 20, user: str | None = None, active: bool = False
) -> list[JobDoc]:
    """The newest jobs first, ``user``'s only, or only those not ended."""
    from spotline.shared.domain.states import JobStatus

    statuses = JobStatus.active() if active else None
    return conn.store.recent_jobs(limit, user=user, statuses=statuses)


def jobs(
    limit: int = 20,
    *,
    user: str | None = None,
    active: bool = False,
    workdir: str | os.PathLike[str] | None = None,
) -> list[JobState]:
    """The newest jobs first, as ``spotline status`` lists them.

    Args:
        limit: at most this many.
        user: only this user's.
        active: only those still running or waiting to.
        workdir: the local stack's folder (see ``spotline.submit``).
    """
    return [JobState.of(job) for job in recent_jobs(connect(workdir), limit, user, active)]


def machine_offers(conn: Connection) -> tuple[list[MachineOffer], str | None]:
    """Every catalog machine, Spot and on demand: its price, the room the
    region's quotas leave, the VMs of it live now and its requests in the
    last 24 hours; and why the quotas could not be read (None: they were)."""
    from datetime import UTC, datetime, timedelta

    from spotline.shared.domain.capacity import capacity
    from spotline.shared.domain.catalog import load_catalog
    from spotline.shared.domain.states import InstanceStatus
    from spotline.shared.domain.vms import Provisioning

    quotas, unknown = _region_quotas(conn)
    since = datetime.now(UTC) - timedelta(hours=24)
    live = [i.machine_id for i in conn.store.list_instances(InstanceStatus.live())]
    offers = []
    for machine in load_catalog().values():
        for machine_id, provisioning, price in (
            (machine.machine_id, Provisioning.SPOT, machine.spot_usd_per_hour),
            (f"{machine.machine_id}.od", Provisioning.STANDARD, machine.on_demand_usd_per_hour),
        ):
            room = None if quotas is None else capacity(machine, provisioning, quotas)
            requests, successes = conn.store.availability(machine_id, since)
            offers.append(
                MachineOffer(
                    machine_id=machine_id,
                    provisioning=str(provisioning),
                    machine_type=machine.machine_type,
                    gpu_type=machine.gpu_type,
                    gpu_count=machine.gpu_count,
                    vcpus=machine.vcpus,
                    memory_gb=machine.memory_gb,
                    usd_per_hour=price,
                    capacity=room,
                    in_use=live.count(machine_id),
                    requests_24h=requests,
                    successes_24h=successes,
                )
            )
    return offers, unknown


def machines(*, workdir: str | os.PathLike[str] | None = None) -> list[MachineOffer]:
    """The machine catalog with prices, as ``spotline machines`` prints it: each
    machine Spot (``NAME``) and on demand (``NAME.od``); ``capacity`` None
    where the region's quotas are unknown (or the machine has none)."""
    offers, _ = machine_offers(connect(workdir))
    return offers


def _region_quotas(conn: Connection) -> tuple[dict[str, Quota] | None, str | None]:
    """The region's quotas through Compute Engine's API, or None and why
    they cannot be read (no credentials, no permission, down)."""
    from google.auth.exceptions import GoogleAuthError

    from spotline.shared.adapters.gce_compute import GceCompute
    from spotline.shared.domain.capacity import GLOBAL_METRICS
    from spotline.shared.domain.errors import SpotlineError

    settings = conn.settings
    compute = GceCompute(settings.project, api_endpoint=settings.compute_endpoint)
    try:
        # The region's quotas, and the project's global one on GPUs.
        found = compute.region_quotas(settings.region)
        global_ = compute.project_quotas()
        return found | {m: q for m, q in global_.items() if m in GLOBAL_METRICS}, None
    except (SpotlineError, GoogleAuthError) as err:
        reason = " ".join(str(err).split())
        return None, f"cannot read the quotas of {settings.region}: {reason}"
