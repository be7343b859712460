"""Letting a VM go: shared by job finished, cancel, recovery and the reaper."""

from __future__ import annotations

from datetime import datetime

from functions.deps import Deps
from shared.domain import lifecycle
from shared.domain.documents import InstanceDoc
from shared.domain.errors import PermanentError
from shared.domain.quotas import free_slot
from shared.domain.states import InstanceSubstatus
from shared.domain.stopping import STOPPING_OR_STOPPED


def release_instance(
    deps: Deps,
    name: str,
    now: datetime,
    note: str,
    substatus: InstanceSubstatus = InstanceSubstatus.TERMINATED,
) -> InstanceDoc:
    """Close the instance: CLOSING/TERMINATING, delete the VM, then CLOSED.

    The Firestore write comes before the delete, so a crash in between leaves
    an instance the reaper sees CLOSING and finishes closing. Re-entrant.
    """
    store = deps.store
    instance = store.update_instance(
        name, lambda current: lifecycle.instance_closing(current, now, note)
    )
    if instance is None:
        raise PermanentError(f"no instance document for {name}")
    if instance.substatus in STOPPING_OR_STOPPED:
        # Its job is stopping it, which the caller could not see (the reaper
        # works from a listing made before): a stopped VM is kept, not deleted.
        return instance
    deps.compute.delete(instance.zone, instance.name)
    closed = store.update_instance(
        name, lambda current: lifecycle.instance_closed(current, now, note, substatus)
    )
    free_instance_slot(deps, instance.user, instance.name, now)
    return closed or instance


def free_instance_slot(deps: Deps, user: str, name: str, now: datetime) -> None:
    """The VM is gone or stopped (or was never made): it no longer counts
    against the user's active-instances quota (``functions.ops.instance_slots``)."""
    deps.store.update_user(user, lambda current: free_slot(current, "active_instances", name, now))
