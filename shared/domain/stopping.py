"""Stopped instances, as pure changes of an ``InstanceDoc``.

With ``stop_period_s > 0`` an on-demand VM whose job (and cooling period) is
over is stopped rather than deleted: Compute Engine keeps its disk, with the
driver, packages and caches on it, and charges no VM time. The same user's
next job asking for the same machine id restarts it (a 5-7 minute
gear-up falls to 0.5-1.5). The reaper deletes it when ``stopped_until`` passes.

CLOSING/STOPPING -> CLOSED/STOPPED -> LAUNCHING (restarted for a job), or
CLOSED/STOPPED -> CLOSED/TERMINATED (deleted).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from spotline.shared.domain.cooling import segment_cost
from spotline.shared.domain.documents import InstanceDoc
from spotline.shared.domain.pricing import CoolingRule
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus
from spotline.shared.domain.transitions import move_instance
from spotline.shared.domain.vms import Provisioning

STOPPED = (InstanceStatus.CLOSED, InstanceSubstatus.STOPPED)
# An instance in these is the stop path's: nothing else deletes its VM.
STOPPING_OR_STOPPED = frozenset({InstanceSubstatus.STOPPING, InstanceSubstatus.STOPPED})


def stoppable(instance: InstanceDoc, stop_period_s: int) -> bool:
    """Only an on-demand VM can be stopped (Spot ones are deleted)."""
    return instance.provisioning == Provisioning.STANDARD and stop_period_s > 0


def stopping(instance: InstanceDoc, now: datetime, note: str) -> InstanceDoc:
    """CLOSING/STOPPING: about to be stopped. Unchanged once closing or closed."""
    if instance.status in (InstanceStatus.CLOSING, InstanceStatus.CLOSED):
        return instance
    return move_instance(instance, InstanceStatus.CLOSING, now, InstanceSubstatus.STOPPING, note)


def stopped(instance: InstanceDoc, now: datetime, period_s: int, rule: CoolingRule) -> InstanceDoc:
    """CLOSED/STOPPED until ``now + period_s``, with the VM time up to now priced."""
    if instance.status == InstanceStatus.CLOSED:
        return instance
    last = segment_cost(instance, now, rule)
    closed = move_instance(
        instance, InstanceStatus.CLOSED, now, InstanceSubstatus.STOPPED, f"kept {period_s} s"
    )
    return closed.model_copy(
        update={
            "cost_usd": round(instance.cost_usd + last, 6),
            "stopped_until": now + timedelta(seconds=period_s),
            "price_per_hour": 0.0,  # a stopped VM costs its disk only
        }
    )


def restartable(instance: InstanceDoc, user: str, machine_id: str, now: datetime) -> bool:
    return (
        (instance.status, instance.substatus) == STOPPED
        and instance.user == user
        and instance.machine_id == machine_id
        and instance.stopped_until is not None
        and now < instance.stopped_until
    )


def restarted(instance: InstanceDoc, job_id: str, attempt: int, now: datetime) -> InstanceDoc:
    """The stopped VM, taken by ``job_id``: LAUNCHING again, a new running
    segment, no sign of life yet. Unchanged when it is no longer restartable
    (another job took it, or its period ran out): the guarded write makes one
    winner."""
    if not restartable(instance, instance.user, instance.machine_id, now):
        return instance
    launching = move_instance(
        instance, InstanceStatus.LAUNCHING, now, note=f"restarted for {job_id}"
    )
    return launching.model_copy(
        update={
            "job_id": job_id,
            "attempt": attempt,
            "price_per_hour": instance.base_price_per_hour,
            "segment_started_at": now,
            "booted_at": None,
            "last_heartbeat_at": None,
            "closed_at": None,
            "stopped_until": None,
            "cooling_since": None,
            "cooling_until": None,
            "cooling_cost_usd": 0.0,
        }
    )


def restarted_for(instance: InstanceDoc, job_id: str, attempt: int, new_vm_name: str) -> bool:
    """A stopped VM restarted for this attempt: LAUNCHING for it under a name
    that is not the attempt's own (a new VM would carry ``new_vm_name``)."""
    return (
        instance.job_id == job_id
        and instance.attempt == attempt
        and instance.status == InstanceStatus.LAUNCHING
        and instance.name != new_vm_name
    )


def stop_expired(instance: InstanceDoc, now: datetime) -> bool:
    """A stopped instance whose period is over (the reaper deletes it)."""
    return (
        (instance.status, instance.substatus) == STOPPED
        and instance.stopped_until is not None
        and now >= instance.stopped_until
    )


def stop_ended(instance: InstanceDoc, now: datetime, note: str) -> InstanceDoc:
    """CLOSED/TERMINATED: the stopped VM was deleted (or is gone)."""
    if (instance.status, instance.substatus) != STOPPED:
        return instance
    return move_instance(
        instance, InstanceStatus.CLOSED, now, InstanceSubstatus.TERMINATED, note=note
    ).model_copy(update={"stopped_until": None})
