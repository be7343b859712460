"""What every handler of a VM's events does first: apply the event to its job."""

from __future__ import annotations

from collections.abc import Callable

from functions.deps import Deps
from shared.contract.events import VmEvent
from shared.domain.documents import JobDoc
from shared.domain.errors import PermanentError


def apply_to_job(deps: Deps, event: VmEvent, change: Callable[[JobDoc], JobDoc]) -> JobDoc:
    """The job after ``change`` (pure; it may run again on contention).

    Raises:
        PermanentError: no such job (a VM spotline does not know of: the reaper
            deletes it), or ``change`` refused the event as stale.
    """
    job = deps.store.update_job(event.job_id, change)
    if job is None:
        raise PermanentError(
            f"{type(event).__name__} from {event.instance} for unknown job {event.job_id}"
        )
    return job
