"""The user's active-instances quota (``max_active_instances``, the seed's 5).

A slot per VM name: taken before a VM is created or a stopped one restarted,
held while the VM lives (cooling included: it is a VM the user pays for),
freed when its instance closes or stops (``functions.ops.release``). The slots are
a list on ``users/{user}`` changed by guarded writes, so concurrent placements
never hold more than the quota.

A cooling VM is a bet that the user's next job wants it; a job that needs the
slot wins the bet off: the user's cooling VMs end early, oldest first, rather
than make the job wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from functions.deps import Deps
from functions.ops.cooling import end_cooling
from shared.domain.documents import JobDoc, UserDoc
from shared.domain.errors import SpotlineError
from shared.domain.quotas import SlotKind, holds, keep_slot, over_quota_reason, take_slots
from shared.domain.states import InstanceStatus

KIND: SlotKind = "active_instances"


class OverInstanceQuota(SpotlineError):
    """The user's active-instances quota is full: the job waits for quota."""


def take_instance_slots(deps: Deps, job: JobDoc, names: Sequence[str], now: datetime) -> None:
    """Hold a slot for each of the VMs ``names`` (all or none), ending cooling
    VMs of the user to make room.

    Raises:
        OverInstanceQuota: no room, and no cooling VM left to end.
    """
    store, limit = deps.store, deps.settings.max_active_instances
    for _ in range(limit + 1):  # each round ends one cooling VM, or gives up
        user = store.update_user(
            job.user, lambda current: take_slots(current, KIND, names, limit, now)
        )
        if all(holds(user, KIND, name) for name in names):
            return
        if not _end_a_cooling_vm(deps, user, job, names, now):
            break
    raise OverInstanceQuota(over_quota_reason(user, KIND, limit))


def keep_instance_slot(deps: Deps, user: str, name: str, now: datetime) -> None:
    """The VM exists (adopted by a redelivered placement): it holds a slot,
    whatever the limit, so the list stays true."""
    deps.store.update_user(user, lambda current: keep_slot(current, KIND, name, now))


def _end_a_cooling_vm(
    deps: Deps, user: UserDoc, job: JobDoc, names: Sequence[str], now: datetime
) -> bool:
    """End the oldest of the user's cooling VMs. False: none to end."""
    store = deps.store
    found = [store.get_instance(name) for name in user.active_instances if name not in names]
    cooling = sorted(
        (i for i in found if i is not None and i.status == InstanceStatus.COOLING),
        key=lambda instance: instance.cooling_since or instance.updated_at,
    )
    note = f"cooling ended early: job {job.job_id} needs its slot"
    return any(end_cooling(deps, instance, now, note) for instance in cooling)
