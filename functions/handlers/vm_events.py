"""What every handler of a VM's events does first: check that the event is its
job's (its token), then apply it to the job."""

from __future__ import annotations

from collections.abc import Callable

from spotline.functions.deps import Deps
from spotline.shared.contract.events import VmEvent
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.event_auth import ForgedEvent, refusal


def apply_to_job(deps: Deps, event: VmEvent, change: Callable[[JobDoc], JobDoc]) -> JobDoc:
    """The job after ``change`` (pure; it may run again on contention), once
    the event's token is found to be one handed to its job's attempt (checked
    on the document ``change`` is applied to).

    Raises:
        PermanentError: no such job (a VM spotline does not know of: the reaper
            deletes it), or ``change`` refused the event as stale.
        ForgedEvent: the token was not handed to the event's job and attempt;
            nothing is written.
    """
    job = deps.store.update_job(
        event.job_id, lambda current: change(authentic(current, event, type(event).__name__))
    )
    if job is None:
        raise PermanentError(
            f"{type(event).__name__} from {event.instance} for unknown job {event.job_id}"
        )
    return job


def authenticated_job(
    deps: Deps, kind: str, job_id: str, attempt: int, instance: str, token: str
) -> JobDoc:
    """The job an event names, once its token is found to be the attempt's
    (for a handler that changes the job through another path, as
    on_spot_preempted does through recovery).

    Raises:
        PermanentError: no such job.
        ForgedEvent: as ``apply_to_job``.
    """
    job = deps.store.get_job(job_id)
    if job is None:
        raise PermanentError(f"{kind} from {instance} for unknown job {job_id}")
    why = refusal(job, attempt, token)
    if why is not None:
        raise ForgedEvent(_dropped(kind, job_id, attempt, instance, why))
    return job


def authentic(job: JobDoc, event: VmEvent, kind: str) -> JobDoc:
    """``job``, when ``event`` carries a token of its attempt (pure).

    Raises:
        ForgedEvent: it does not.
    """
    why = refusal(job, event.attempt, event.token)
    if why is not None:
        raise ForgedEvent(_dropped(kind, event.job_id, event.attempt, event.instance, why))
    return job


def _dropped(kind: str, job_id: str, attempt: int, instance: str, why: str) -> str:
    return f"{kind} from {instance} for job {job_id} attempt {attempt} dropped: {why}"
