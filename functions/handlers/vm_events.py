"""What every handler of a VM's events does first: check that the event is its
job's (the topic it came through, in the per-user mode, and its token), then
apply it to the job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spotline.functions.deps import Deps
from spotline.shared.contract.events import VmEvent
from spotline.shared.domain import event_auth, identity
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.event_auth import ForgedEvent


@dataclass(frozen=True)
class Arrival:
    """How an event came: the topic's key (``"epoch_done"``), the message's
    CloudEvent source (which names the topic), and the per-user mode's users."""

    key: str
    source: str
    users: tuple[str, ...]


def arrival(deps: Deps, key: str, source: str) -> Arrival:
    return Arrival(key, source, tuple(deps.settings.user_topics))


def apply_to_job(
    deps: Deps, via: Arrival, event: VmEvent, change: Callable[[JobDoc], JobDoc]
) -> JobDoc:
    """The job after ``change`` (pure; it may run again on contention), once
    the event is found to be its job's (``authentic``, checked on the document
    ``change`` is applied to).

    Raises:
        PermanentError: no such job (a VM spotline does not know of: the reaper
            deletes it), or ``change`` refused the event as stale.
        ForgedEvent: the event is not its job's attempt's; nothing is written.
    """
    job = deps.store.update_job(
        event.job_id,
        lambda current: change(
            authentic(current, via, event.attempt, event.instance, event.token, _kind(event))
        ),
    )
    if job is None:
        raise PermanentError(f"{_kind(event)} from {event.instance} for unknown job {event.job_id}")
    return job


def authenticated_job(
    deps: Deps, via: Arrival, kind: str, job_id: str, attempt: int, instance: str, token: str
) -> JobDoc:
    """The job an event names, once the event is found to be its job's (for a
    handler that changes the job through another path, as on_spot_preempted
    does through recovery).

    Raises:
        PermanentError: no such job.
        ForgedEvent: as ``apply_to_job``.
    """
    job = deps.store.get_job(job_id)
    if job is None:
        raise PermanentError(f"{kind} from {instance} for unknown job {job_id}")
    return authentic(job, via, attempt, instance, token, kind)


def authentic(
    job: JobDoc, via: Arrival, attempt: int, instance: str, token: str, kind: str
) -> JobDoc:
    """``job``, when the event came through its user's own topic (the per-user
    mode: ``identity.vm_event_refusal``) and carries a token of its attempt
    (``event_auth``). Pure.

    Raises:
        ForgedEvent: it does not.
    """
    why = identity.vm_event_refusal(via.key, job.user, via.source, via.users)
    if why is None:
        why = event_auth.refusal(job, attempt, token, instance)
    if why is not None:
        raise ForgedEvent(
            f"{kind} from {instance} for job {job.job_id} attempt {attempt} dropped: {why}"
        )
    return job


def _kind(event: VmEvent) -> str:
    return type(event).__name__
