"""spotline-spot-preempted -> on_spot_preempted: a Spot VM was taken away.

Two reporters: the agent, after the trainer saved its state on the 30 s
notice (it says where and at which step), and a Cloud Logging sink on
``compute.instances.preempted``, which fires even when the VM could not
publish. Whichever comes first moves the job to its next attempt and places
it at once; the other is then stale and acknowledged. A trainer that exited 0
just before the preemption still completes the job when its JobFinished comes
after this (``spotline.shared.domain.late_finish``, in on_job_finished).

The agent's report carries its attempt's token, like every VM event. The log
sink's carries none (Cloud Logging writes it, not a VM), and anyone who may
publish on the topic can write one, so it is taken only for a VM that is its
job's current attempt's and whose numeric id is the entry's: the id spotline
recorded, or, where none is recorded yet (the VM was not read back when
made, and has not booted), the id Compute Engine gives for the VM of that
name and zone. A VM deleted and re-created under the same name is another VM.
In the per-user mode only the sink's writer publishes on the shared topic (the
VMs publish on their users' own), so an entry is taken from there alone.
"""

from __future__ import annotations

from pydantic import ValidationError

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message, pubsub_handler
from spotline.functions.handlers.vm_events import arrival, authenticated_job
from spotline.functions.ops.recovery import preempted
from spotline.shared.contract.events import PreemptionNotice, parse_preemption
from spotline.shared.domain.documents import InstanceDoc
from spotline.shared.domain.errors import InvalidMessage, PermanentError
from spotline.shared.domain.identity import topic_of
from spotline.shared.domain.lifecycle import StaleEvent, current_vms
from spotline.shared.topics import TOPICS


class UnmatchedPreemption(PermanentError):
    """A preemption log entry for a VM that is not the attempt on record."""


@pubsub_handler
def on_spot_preempted(message: Message, deps: Deps) -> None:
    try:
        notice = parse_preemption(message.data)
    except (ValueError, ValidationError) as err:
        raise InvalidMessage(f"not a preemption: {err}") from err
    if notice.source == "agent":
        if notice.job_id is None or notice.attempt is None:  # a SpotPreempted names both
            raise InvalidMessage("a preemption from a VM must name its job and attempt")
        via = arrival(deps, "spot_preempted", message.source)
        authenticated_job(
            deps, via, "SpotPreempted", notice.job_id, notice.attempt, notice.instance, notice.token
        )
    else:
        _check_log_route(deps, message.source)
    instance = deps.store.get_instance(notice.instance)
    if instance is None:
        raise PermanentError(f"preemption of {notice.instance}, which spotline does not know")
    if notice.source == "agent":
        _check_agent(notice, instance)
    else:
        _check_log_entry(deps, notice, instance)
    preempted(deps, instance, notice, deps.clock())


def _check_agent(notice: PreemptionNotice, instance: InstanceDoc) -> None:
    """The instance must be the one the (authenticated) event's attempt ran on.

    Raises:
        StaleEvent: it is another attempt's or another job's now (claimed,
            restarted) or was never this one's.
    """
    if (instance.job_id, instance.attempt) != (notice.job_id, notice.attempt):
        raise StaleEvent(
            f"{notice.instance}: job {notice.job_id} attempt {notice.attempt} is not the "
            f"instance's (job {instance.job_id} attempt {instance.attempt})"
        )


def _check_log_route(deps: Deps, source: str) -> None:
    """In the per-user mode the VMs publish on their users' own topics, and
    only the log sink's writer on the shared one: a log entry that came any
    other way was written by a VM.

    Raises:
        UnmatchedPreemption: it came through another topic than the shared one.
    """
    topic = topic_of(source)
    if deps.settings.user_topics and topic != TOPICS["spot_preempted"]:
        raise UnmatchedPreemption(
            f"preemption log entry dropped: it came through {topic or source}, and only "
            f"{TOPICS['spot_preempted']} carries the log sink's entries"
        )


def _check_log_entry(deps: Deps, notice: PreemptionNotice, instance: InstanceDoc) -> None:
    """A log entry names a VM only: act only for the VM of its job's current
    attempt, with the numeric id on record (or Compute Engine's, asked when
    none is recorded).

    Raises:
        UnmatchedPreemption: the entry is of another VM, or the instance is not
            the current attempt's.
    """
    where = f"preemption log entry for {notice.instance}"
    if instance.instance_id:
        known, whose = instance.instance_id, "the id on record"
    else:
        vm = deps.compute.get(instance.zone, instance.name)  # TransientError: retried
        if vm is None or not vm.id:
            raise UnmatchedPreemption(
                f"{where} dropped: no id is on record and Compute Engine has no VM "
                f"{instance.name} in {instance.zone} to ask"
            )
        known, whose = vm.id, f"Compute Engine's id of {instance.name} in {instance.zone}"
    if notice.instance_id != known:
        raise UnmatchedPreemption(
            f"{where} dropped: its instance id {notice.instance_id or '(none)'} is not "
            f"{known}, {whose} (another VM of the same name, or a forged entry)"
        )
    job = deps.store.get_job(instance.job_id)
    if job is None or job.attempt != instance.attempt or instance.name not in current_vms(job):
        now = f"attempt {job.attempt} on {job.instance}" if job else "gone"
        raise UnmatchedPreemption(
            f"{where} dropped: it is attempt {instance.attempt} of job {instance.job_id}, "
            f"whose current attempt is {now}"
        )
