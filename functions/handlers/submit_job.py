"""spotline-submit -> submit_job: validate the spec, create the job, get a VM."""

from __future__ import annotations

from datetime import datetime

from functions.deps import Deps
from functions.handlers.envelope import Message, pubsub_handler
from functions.ops.placement import launch
from functions.ops.queue import wait_for_quota
from functions.ops.slots import take_job_slot
from shared import logs
from shared.domain.documents import Rejection
from shared.domain.errors import InvalidMessage, PermanentError
from shared.domain.lifecycle import job_id_for, new_job
from shared.domain.spec import parse_spec
from shared.domain.states import JobSubstatus

_PAYLOAD_KEPT = 1024


@pubsub_handler
def submit_job(message: Message, deps: Deps) -> None:
    now = deps.clock()
    store = deps.store
    try:
        spec = parse_spec(message.data)
    except InvalidMessage as err:
        _reject(deps, message, f"not a valid job spec: {err}", now)
        raise
    limit = deps.settings.max_active_instances
    if spec.nodes > limit:
        reason = f"nodes: {spec.nodes} VMs is over the active-instances quota of {limit}"
        _reject(deps, message, reason, now)
        raise PermanentError(reason)
    job_id = job_id_for(spec, message.message_id)
    job = new_job(spec, job_id, message.message_id, now)
    if not store.create_job(job):
        existing = store.get_job(job_id)
        if existing is None:
            raise RuntimeError(f"job {job_id} exists and vanished; retrying")
        if existing.message_id != message.message_id:
            reason = f"job_id: {job_id!r} is already taken by another submission"
            _reject(deps, message, reason, now)
            raise PermanentError(reason)
        job = existing  # a redelivery: carry on from where the first delivery got
    if job.substatus != JobSubstatus.REQUESTING_SERVER:
        logs.info(f"job {job_id}: already {job.substatus}, nothing to do", job_id=job_id)
        return
    over_quota = take_job_slot(deps, job, now)
    if over_quota is not None:
        wait_for_quota(deps, job, now, over_quota)
        return
    launch(deps, job, now)


def _reject(deps: Deps, message: Message, reason: str, now: datetime) -> None:
    deps.store.record_rejection(
        Rejection(
            message_id=message.message_id,
            reason=reason,
            payload=message.data[:_PAYLOAD_KEPT].decode("utf-8", errors="replace"),
            at=now,
        )
    )
