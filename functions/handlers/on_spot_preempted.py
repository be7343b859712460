"""spotline-spot-preempted -> on_spot_preempted: a Spot VM was taken away.

Two reporters: the agent, after the trainer saved its state on the 30 s
notice (it says where and at which step), and a Cloud Logging sink on
``compute.instances.preempted``, which fires even when the VM could not
publish. Whichever comes first moves the job to its next attempt and places
it at once; the other is then stale and acknowledged. A trainer that exited 0
just before the preemption still completes the job when its JobFinished comes
after this (``shared.domain.late_finish``, in on_job_finished).
"""

from __future__ import annotations

from pydantic import ValidationError

from functions.deps import Deps
from functions.handlers.envelope import Message, pubsub_handler
from functions.ops.recovery import preempted
from shared.contract.events import parse_preemption
from shared.domain.errors import InvalidMessage, PermanentError
from shared.domain.lifecycle import StaleEvent


@pubsub_handler
def on_spot_preempted(message: Message, deps: Deps) -> None:
    try:
        notice = parse_preemption(message.data)
    except (ValueError, ValidationError) as err:
        raise InvalidMessage(f"not a preemption: {err}") from err
    instance = deps.store.get_instance(notice.instance)
    if instance is None:
        raise PermanentError(f"preemption of {notice.instance}, which spotline does not know")
    if notice.attempt is not None and notice.attempt != instance.attempt:
        raise StaleEvent(f"{notice.instance}: attempt {notice.attempt} is not the instance's")
    preempted(deps, instance, notice, deps.clock())
