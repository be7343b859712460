"""Cooling instances, as pure changes of an ``InstanceDoc``.

With ``cool_down_period_s > 0`` a finished job's VM is kept, idle and
claimable by the same user's next job asking for the same machine id. Its cost
is kept in segments: a running segment at the VM's own rate, a cooling
segment at the escalating price (``spotline.shared.domain.pricing``); a segment's cost is
added to ``cost_usd`` when it closes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from spotline.shared.domain.documents import InstanceDoc, JobDoc
from spotline.shared.domain.pricing import CoolingRule, cooling_cost, cooling_price, vm_cost
from spotline.shared.domain.states import InstanceStatus
from spotline.shared.domain.transitions import move_instance
from spotline.shared.domain.vms import Provisioning


def segment_cost(instance: InstanceDoc, now: datetime, rule: CoolingRule) -> float:
    """What the current segment has cost up to ``now``."""
    started = instance.segment_started_at or instance.created_at
    seconds = (now - started).total_seconds()
    if instance.status != InstanceStatus.COOLING:
        return vm_cost(instance.base_price_per_hour, seconds)
    if instance.provisioning == Provisioning.SPOT:
        return cooling_cost(
            instance.base_price_per_hour, instance.on_demand_price_per_hour, seconds, rule
        )
    return vm_cost(instance.base_price_per_hour, seconds)  # on demand: no escalation


def close_segment(instance: InstanceDoc, now: datetime, rule: CoolingRule) -> InstanceDoc:
    """The current segment priced into ``cost_usd`` and a new one begun: before
    a move that would price the rest of it otherwise (a cooling VM closing)."""
    return instance.model_copy(
        update={
            "cost_usd": round(instance.cost_usd + segment_cost(instance, now, rule), 6),
            "segment_started_at": now,
        }
    )


def start_cooling(
    instance: InstanceDoc, now: datetime, period_s: int, rule: CoolingRule
) -> InstanceDoc:
    """The job is done: keep the VM, idle and claimable, for ``period_s``."""
    if instance.status == InstanceStatus.COOLING:
        return instance
    closed = round(instance.cost_usd + segment_cost(instance, now, rule), 6)
    cooling = move_instance(instance, InstanceStatus.COOLING, now, note=f"cooling for {period_s} s")
    return cooling.model_copy(
        update={
            "cost_usd": closed,
            "segment_started_at": now,
            "cooling_since": now,
            "cooling_until": now + timedelta(seconds=period_s),
            "cooling_cost_usd": 0.0,
        }
    )


def while_cooling(instance: InstanceDoc, now: datetime, rule: CoolingRule) -> InstanceDoc:
    """The price in force and the cooling cost so far (the reaper, each sweep)."""
    if instance.status != InstanceStatus.COOLING or instance.cooling_since is None:
        return instance
    held_s = (now - instance.cooling_since).total_seconds()
    price = instance.base_price_per_hour
    if instance.provisioning == Provisioning.SPOT:
        price = cooling_price(price, instance.on_demand_price_per_hour, held_s, rule)
    return instance.model_copy(
        update={
            "price_per_hour": round(price, 6),
            "cooling_cost_usd": round(segment_cost(instance, now, rule), 6),
            "updated_at": now,
        }
    )


def claimable(instance: InstanceDoc, user: str, machine_id: str, now: datetime) -> bool:
    return (
        instance.status == InstanceStatus.COOLING
        and instance.user == user
        and instance.machine_id == machine_id
        and instance.cooling_until is not None
        and now < instance.cooling_until
    )


def claim(
    instance: InstanceDoc, job_id: str, attempt: int, now: datetime, rule: CoolingRule
) -> InstanceDoc:
    """A new job takes the cooling VM: the cooling segment closes, the VM runs
    again at its own rate. Unchanged when it is no longer claimable (another
    job won it, or its period ran out): the guarded write makes one winner."""
    if not claimable(instance, instance.user, instance.machine_id, now):
        return instance
    cooled = segment_cost(instance, now, rule)
    running = move_instance(instance, InstanceStatus.EXECUTING, now, note=f"claimed by {job_id}")
    return running.model_copy(
        update={
            "job_id": job_id,
            "attempt": attempt,
            "cost_usd": round(instance.cost_usd + cooled, 6),
            "price_per_hour": instance.base_price_per_hour,
            "segment_started_at": now,
            "cooling_since": None,
            "cooling_until": None,
            "cooling_cost_usd": round(cooled, 6),  # what the previous job is charged
            "cooled_for_job": instance.job_id,
        }
    )


def charge(job: JobDoc, instance_name: str, cost_usd: float) -> JobDoc:
    """Charge ``job`` the cooling period it left on ``instance_name``.

    Idempotent: the charge for that instance is set, not added to, and a
    period's cost only grows, so a repeated or stale charge changes nothing."""
    if cost_usd <= job.cooling_charges.get(instance_name, 0.0):
        return job
    charges = {**job.cooling_charges, instance_name: round(cost_usd, 6)}
    return job.model_copy(
        update={
            "cooling_charges": charges,
            "cooling_cost_usd": round(sum(charges.values()), 6),
        }
    )
