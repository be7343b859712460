"""The next attempt restores only once the lost attempt's save is complete.

A lost attempt's VMs are deleted while the next attempt's VMs boot (its
insert never waits for their deletes). A node of the lost attempt may still
be saving then: the built-in trainers write straight to storage during the
30 s notice, and a local-folder mirror uploads only after the trainer has
exited. A new attempt that restored meanwhile would resume from the save
before, and lose the work of the late one.

So a VM made while a VM of an earlier attempt may still run carries a gate
in its metadata (``spotline.shared.domain.vms.RESTORE_METADATA_KEY``); its agent gears up
(code, data set, requirements) but starts the trainer only once the gate
reads ``RESTORE_GO``. The gate opens when every VM of the earlier attempts is gone:
each delete returned (the recovery that made the VMs, or the reaper that
finished its deletes), or its agent reported its save and its VM was deleted.

Why every old VM gone rather than a marker written last: a marker must be
written after the last byte of every save, by whatever saves (a trainer's
own writes, the mirror's upload after the trainer); a VM that is gone writes
nothing more, whoever was writing. A VM kept through its notice (the log
sink's report: no delete of ours returns) is gone at the notice's end, so a
gate waiting only for such VMs names that time (``gate_value``). The agent
also gives up waiting after ``RESTORE_WAIT_S`` (a function that died before
opening the gate): by then no save of a lost VM can still be under way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta

from spotline.shared.domain import pending_nodes
from spotline.shared.domain.documents import InstanceDoc, JobDoc
from spotline.shared.domain.liveness import (
    NOTICE_MARGIN_S,
    PREEMPTION_NOTICE_S,
    in_preemption_notice,
)
from spotline.shared.domain.placement import vm_attempt
from spotline.shared.domain.states import InstanceStatus
from spotline.shared.domain.vms import RESTORE_UNTIL, RESTORE_WAIT


def gate_value(job: JobDoc, instances: Iterable[InstanceDoc], now: datetime) -> str | None:
    """The restore gate a VM of the job's current attempt is made with. None:
    no earlier VM may still save. ``RESTORE_WAIT``: one is being deleted, and
    whoever sees its delete return opens the gate. Only VMs kept through their
    notice (closed PREEMPTED, no delete of ours to return): the gate also
    names the notice's end (``RESTORE_WAIT``-until-UNIX_TIME), when Compute
    Engine has taken them whoever saw it, so the agent waits no longer."""
    earlier = [
        instance
        for instance in instances
        if instance.job_id == job.job_id and instance.attempt < job.attempt
    ]
    if any(instance.status in InstanceStatus.live() for instance in earlier):
        return RESTORE_WAIT
    kept = [
        instance.closed_at
        for instance in earlier
        if instance.closed_at is not None
        and in_preemption_notice(instance.name, instance, None, now)
    ]
    if not kept:
        return None
    until = max(kept) + timedelta(seconds=PREEMPTION_NOTICE_S + NOTICE_MARGIN_S)
    return restore_until(until)


def restore_until(until: datetime) -> str:
    return f"{RESTORE_WAIT}{RESTORE_UNTIL}{math.ceil(until.timestamp())}"


def earlier_slots(job: JobDoc, held: Iterable[str]) -> list[str]:
    """The active-instance slots (VM names) held for the job's earlier
    attempts: VMs being deleted while the next attempt's VMs are made. Both
    count in the user's list for that overlap; the next attempt is allowed
    over the quota by these, as the same job's VMs, never another job's. A
    gang's node being replaced within the attempt (``node_replacement``) is
    one too: its replacement is inserted before it is deleted."""
    lost = [node.lost for node in pending_nodes.pending(job.replacing)]
    names = []
    for name in held:
        made_for = vm_attempt(name)
        if (
            made_for is not None and made_for[0] == job.job_id and made_for[1] < job.attempt
        ) or name in lost:
            names.append(name)
    return names
