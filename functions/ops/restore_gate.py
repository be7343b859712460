"""Opening the restore gate of a job's current attempt once no VM of an
earlier attempt can still be saving (``spotline.shared.domain.restore_gate``).

Called by whoever saw the last such VM go: the recovery that inserted the
next attempt and then deleted the lost one's VMs, the reaper that finished
those deletes after that recovery died, the agent's report that let a VM
kept through its notice go. Re-entrant, and harmless on a VM that has no
gate (its agent only reads the item when it was made with one).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from spotline.functions.deps import Deps
from spotline.functions.ops.vm_metadata import write_metadata
from spotline.shared import logs
from spotline.shared.domain.restore_gate import gate_value
from spotline.shared.domain.states import InstanceStatus
from spotline.shared.domain.vms import RESTORE_GO, RESTORE_METADATA_KEY, RESTORE_WAIT


def open_restore_gate(deps: Deps, job_id: str, now: datetime, gone: Collection[str] = ()) -> bool:
    """Tell the job's current attempt's VMs to restore, unless a VM of an
    earlier attempt is still being deleted. True: opened, or narrowed to the
    notice's end of the VMs kept through it (or nothing to open).

    Args:
        gone: VMs the caller has just deleted (a VM kept through its notice
            still reads as saving on its closed instance).
    """
    store = deps.store
    job = store.get_job(job_id)
    if job is None or job.replacing is not None:
        return True  # a gang replacing a node: its regroup opens the replacement's gate
    instances = store.instances_of_job(job_id)
    # What is left to wait for: none (open), or only VMs kept through their
    # notice (wait no later than its end: a gang's noticed node, kept to save
    # while its other nodes were deleted), or a delete not returned yet.
    value = gate_value(job, [i for i in instances if i.name not in gone], now) or RESTORE_GO
    if value == RESTORE_WAIT:
        return False
    for instance in instances:
        if instance.attempt == job.attempt and instance.status in InstanceStatus.live():
            try:
                write_metadata(deps, instance.zone, instance.name, {RESTORE_METADATA_KEY: value})
            except Exception as err:  # its agent stops waiting at RESTORE_WAIT_S
                logs.warning(f"{instance.name}: could not open its restore gate: {err}")
                continue
            logs.info(
                f"{instance.name}: the earlier attempt's VMs are gone or kept through their "
                f"notice; its restore gate: {value}",
                job_id=job_id,
                instance=instance.name,
            )
    return True
