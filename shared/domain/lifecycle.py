"""What each event does to a job or an instance: pure functions, no I/O.

Handlers load the documents, call these, and write the result with a guarded
write; since the store may call them again after a conflicting write, they
must not have side effects.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

from spotline.shared.contract.events import EpochDone, Heartbeat, JobFinished, VmBooted, VmEvent
from spotline.shared.domain import failure_policy, gang_resize
from spotline.shared.domain.cooling import segment_cost
from spotline.shared.domain.documents import (
    AttemptRecord,
    EpochDoc,
    HistoryEntry,
    InstanceDoc,
    JobDoc,
)
from spotline.shared.domain.errors import (
    IllegalTransition,
    InvalidMessage,
    PermanentError,
    TransientError,
)
from spotline.shared.domain.job_events import with_event
from spotline.shared.domain.pricing import CoolingRule, savings_percent, vm_cost
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus, JobSubstatus
from spotline.shared.domain.transitions import fail_job, move_instance, move_job, next_attempt

S_ON_VM = JobSubstatus.on_vm()

_LOG_TAIL_CHARS = 2000
# What job_id_for derives from a message id; a user's own job id may not take
# this form, or it could take the id of a submission yet to come.
DERIVED_JOB_ID = re.compile(r"j[0-9a-f]{12}")


class StaleEvent(PermanentError):
    """An event of an older attempt, or from a VM the job no longer owns."""


def job_id_for(spec: JobSpec, message_id: str) -> str:
    """The spec's own id, else one derived from the Pub/Sub message id, so a
    redelivered message maps to the same job."""
    if spec.job_id:
        return spec.job_id
    return "j" + hashlib.sha256(message_id.encode()).hexdigest()[:12]


def new_job(spec: JobSpec, job_id: str, message_id: str, now: datetime) -> JobDoc:
    start = HistoryEntry(
        at=now,
        status="QUEUING",
        substatus=JobSubstatus.REQUESTING_SERVER,
        attempt=1,
        note="submitted",
    )
    job = JobDoc(
        job_id=job_id,
        user=spec.user,
        description=spec.description,
        spec=spec,
        epochs=spec.epochs,
        progress=f"0/{spec.epochs}",
        message_id=message_id,
        created_at=now,
        updated_at=now,
        history=[start],
    )
    # The first notification: the job exists, waiting for a VM.
    return with_event(job, None, now, "submitted")


def current_vms(job: JobDoc) -> list[str]:
    """The VMs of the job's current attempt: its nodes, or its one VM."""
    if job.nodes:
        return list(job.nodes)
    return [job.instance] if job.instance else []


class NotYetRecorded(TransientError):
    """An event of the current attempt before the job has recorded its VM: the
    VM was made, but the placement that made it has not written it yet (its
    answer came late, or the store or Compute failed right after). Redelivered,
    it is heard once the placement (retried, or the reaper's) records the VM;
    dropped as stale, a JobFinished would be lost and the job run again."""


def check_current(job: JobDoc, event: VmEvent) -> None:
    """Raises StaleEvent unless the event comes from a VM of the current
    attempt; NotYetRecorded while that attempt is still being placed."""
    placing = job.substatus == JobSubstatus.REQUESTING_SERVER and not current_vms(job)
    if event.attempt == job.attempt and placing and job.status in JobStatus.active():
        raise NotYetRecorded(
            f"job {job.job_id}: event from {event.instance} (attempt {event.attempt}) "
            "before the attempt's VM is recorded; try again later"
        )
    if event.attempt != job.attempt or event.instance not in current_vms(job):
        raise StaleEvent(
            f"job {job.job_id}: event from {event.instance} (attempt {event.attempt}) "
            f"ignored; the current attempt is {job.attempt} on {job.instance}"
        )


def advance(job: JobDoc, to: JobSubstatus, now: datetime, note: str = "") -> JobDoc:
    """Move forward when the table allows it; a late event leaves the job as is.
    A gang replacing a node goes back to training only when it regroups
    (``node_replacement``): a survivor's heartbeat saying TRAINING, sent as
    its ranks stopped, is not the regroup."""
    if job.substatus == JobSubstatus.REPLACING_NODE and to in VM_PHASES[:-1]:
        return job
    try:
        return move_job(job, to, now, note)
    except IllegalTransition:
        return job


# The steps a VM goes through, in order; the agent reports when it entered each.
VM_PHASES = (
    JobSubstatus.GEARING_UP_ENV,
    JobSubstatus.SENDING_MODEL_AND_DATA,
    JobSubstatus.INSTALLING_REQUIREMENTS,
    JobSubstatus.TRAINING,
    JobSubstatus.RETURNING,
)


def catch_up(job: JobDoc, event: VmEvent, now: datetime) -> JobDoc:
    """Move through every step the VM reports having entered, stamped with the
    VM's times, so the timeline is whole whichever event arrives first."""
    for phase in VM_PHASES:
        entered = event.phases.get(phase)
        if entered is not None:
            note = f"{event.instance} booted" if phase == JobSubstatus.GEARING_UP_ENV else ""
            job = advance(job, phase, min(entered, now), note=note)
    return job


def booted(job: JobDoc, event: VmBooted, now: datetime) -> JobDoc:
    check_current(job, event)
    job = catch_up(job, event, now)
    return advance(job, JobSubstatus.GEARING_UP_ENV, now, note=f"{event.instance} booted")


def heartbeat(job: JobDoc, event: Heartbeat, now: datetime) -> JobDoc:
    check_current(job, event)
    job = catch_up(job, event, now)
    if event.resumed_from_step is not None:
        job = _update_attempt(job, resumed_from_step=event.resumed_from_step)
    return advance(job, event.phase, now) if event.phase else job


def epoch_done(job: JobDoc, event: EpochDone, now: datetime) -> JobDoc:
    check_current(job, event)
    if not within_epochs(job, event):
        raise InvalidMessage(
            f"job {job.job_id}: epoch {event.epoch}/{event.epochs} from {event.instance} "
            f"is beyond the spec's {job.spec.epochs} epochs"
        )
    return record_progress(
        advance(catch_up(job, event, now), JobSubstatus.TRAINING, now), event, now
    )


def within_epochs(job: JobDoc, event: EpochDone) -> bool:
    """Whether the epoch is one of the job's: the spec says how many there are."""
    return event.epochs <= job.spec.epochs


def record_progress(job: JobDoc, event: EpochDone, now: datetime) -> JobDoc:
    """The epoch's progress and metrics on the job, when newer than what it shows
    and one of the job's epochs."""
    if event.epoch <= job.epoch or not within_epochs(job, event):
        return job  # a redelivery, or an epoch replayed after a resume
    return job.model_copy(
        update={
            "epoch": event.epoch,
            "epochs": event.epochs,
            "step": event.step,
            "progress": f"{event.epoch}/{event.epochs}",
            "metrics": dict(event.metrics),
            "checkpoint_uri": event.checkpoint_uri or job.checkpoint_uri,
            "updated_at": now,
        }
    )


def epoch_doc(event: EpochDone, now: datetime) -> EpochDoc:
    return EpochDoc(
        epoch=event.epoch,
        epochs=event.epochs,
        attempt=event.attempt,
        step=event.step,
        metrics=dict(event.metrics),
        checkpoint_uri=event.checkpoint_uri,
        instance=event.instance,
        at=now,
    )


def finished(job: JobDoc, event: JobFinished, now: datetime) -> JobDoc:
    """COMPLETED on exit code 0; else a new attempt when the failure policy
    restarts it (``failure_policy``), or FAILED with a reason a person can act on."""
    check_current(job, event)
    job = catch_up(job, event, now)
    if event.last_epoch is not None:
        job = record_progress(job, event.last_epoch, now)
    if job.status in JobStatus.terminal():
        return job
    if event.exit_code == 0 and event.instance != gang_resize.head(job):
        # A worker node is done: the job ends with node 0 (or, while an
        # elastic gang trains without its replacement, with its first node).
        return job
    if event.exit_code != 0 and job.replacing is not None:
        # A node that exits while its gang waits for a replacement will not
        # regroup (its ranks died in the lost peer's collective, most often).
        why = f"{event.instance} exited with code {event.exit_code} while the gang waited"
        return relaunch_gang(job, now, why)
    outcome = "completed" if event.exit_code == 0 else "failed"
    job = end_attempt(job, now, outcome)
    if event.exit_code == 0:
        job = advance(job, JobSubstatus.RETURNING, now)
        return advance(job, JobSubstatus.COMPLETED, now, note=f"{event.instance} exited 0")
    restart = None if event.unrecoverable else failure_policy.restart_for(job, event.exit_code)
    if restart is not None:
        note = failure_policy.restart_note(job, restart, event.exit_code, event.instance)
        restarted = next_attempt(job, JobSubstatus.ERRORED, now, note, job.spec.max_attempts)
        if restarted.status in JobStatus.terminal():
            return restarted  # max_attempts: no restart to count
        return failure_policy.counted(restarted, restart)
    tail = event.log_tail[-_LOG_TAIL_CHARS:]
    reason = failure_policy.error_reason(job, event.exit_code, event.instance)
    if event.unrecoverable:
        reason = f"{tail.strip()} on {event.instance}; no new VM can fix that, so no restart"
        tail = ""
    if tail:
        reason += f"; last output:\n{tail}"
    try:
        return fail_job(job, JobSubstatus.FAILED, now, reason)
    except IllegalTransition:
        return job


def vm_recorded(
    job: JobDoc,
    instance: str,
    zone: str,
    machine_id: str,
    now: datetime,
    price_per_hour: float = 0.0,
    on_demand_price_per_hour: float = 0.0,
    instance_id: str | None = None,
    nodes: list[str] | None = None,
    node_ids: list[str] | None = None,
) -> JobDoc:
    """The attempt's VM (or the gang's node 0) exists: CONNECTING_SERVER, and a
    new attempt record. An ended job is left as it is: it ended while the VM
    was being made (a cancel, or a late finish of the attempt before, which
    may have taken the job back to that attempt); the reaper lets the VM go."""
    if job.status in JobStatus.terminal():
        return job
    where = f"{instance} in {zone}" if not nodes else f"{len(nodes)} nodes in {zone}"
    job = advance(job, JobSubstatus.CONNECTING_SERVER, now, note=where)
    if job.instance == instance:
        return job
    record = AttemptRecord(
        attempt=job.attempt,
        instance=instance,
        zone=zone,
        machine_id=machine_id,
        started_at=now,
        price_per_hour=price_per_hour,
        on_demand_price_per_hour=on_demand_price_per_hour,
        instance_id=instance_id,
        logs_query=logs_query(node_ids or [instance_id or ""], job.job_id, job.attempt),
        nodes=len(nodes or [instance]),
        node_names=list(nodes or []),
        node_ids=list(node_ids or []),
    )
    kept = [r for r in job.attempts if r.attempt != job.attempt]
    return job.model_copy(
        update={
            "instance": instance,
            "nodes": list(nodes or []),
            "zone": zone,
            "machine_id": machine_id,
            "attempts": [*kept, record],
        }
    )


def logs_query(instance_ids: list[str], job_id: str, attempt: int) -> str:
    """A Cloud Logging query for one attempt's output on all its VMs (every node
    of a gang), valid after they are gone: instance ids are never reused, and
    the agent labels its lines with the job, the attempt and the node. A VM
    whose id is not known (an empty id) is found by the labels alone."""
    where = f'jsonPayload.job_id="{job_id}" AND jsonPayload.attempt={attempt}'
    ids = [f'"{i}"' for i in instance_ids]
    if ids and all(instance_ids):
        one_of = ids[0] if len(ids) == 1 else f"({' OR '.join(ids)})"
        where = f"resource.labels.instance_id={one_of} AND {where}"
    return f'resource.type="gce_instance" AND {where}'


def vm_lost(
    job: JobDoc,
    instance: str,
    attempt: int,
    cause: JobSubstatus,
    now: datetime,
    note: str,
    step: int | None = None,
    checkpoint_uri: str | None = None,
) -> JobDoc:
    """The attempt's VM is gone (PREEMPTED or STALLED): close the attempt and
    start the next one, or fail the job after ``max_attempts`` VMs, or on a
    preemption past ``max_preemptions`` (``failure_policy``).

    Raises:
        StaleEvent: the VM is not the job's current one, or the job is not on a VM
            (a second report of the same loss, or a late one).
    """
    if attempt != job.attempt or instance not in current_vms(job) or job.substatus not in S_ON_VM:
        raise StaleEvent(
            f"job {job.job_id}: loss of {instance} (attempt {attempt}) ignored; the job is "
            f"{job.status}/{job.substatus} on attempt {job.attempt} ({job.instance})"
        )
    outcome = cause.lower()
    # A gang's node 0 may have said what it saved first (saved_state): the
    # newer save stands, since the next attempt resumes from the newest (the
    # noticed node's shutdown script reports the last epoch's checkpoint).
    saved = next((r.checkpoint_step for r in job.attempts if r.attempt == attempt), None)
    if saved is not None and (step is None or saved > step):
        step, checkpoint_uri = saved, None  # its checkpoint is on the job already
    job = end_attempt(job, now, outcome, checkpoint_step=step)
    if checkpoint_uri:
        job = job.model_copy(update={"checkpoint_uri": checkpoint_uri})
    if step is not None:
        note = f"{note}; state saved at step {step}"
    give_up = None
    if cause == JobSubstatus.PREEMPTED:
        job = _avoid_after_preemptions(job)
        give_up = failure_policy.preemption_limit(job, note)
    return next_attempt(job, cause, now, note, job.spec.max_attempts, give_up)


def relaunch_gang(job: JobDoc, now: datetime, why: str) -> JobDoc:
    """A node's replacement given up (``why``): the attempt ends as the
    preemption it began with (counted then, not again) and the gang is
    relaunched whole as a new attempt (``spotline.shared.domain.node_replacement``)."""
    replacing = job.replacing
    if replacing is None or job.status in JobStatus.terminal():
        return job
    note = f"{replacing.lost} could not be replaced ({why}); relaunching the whole gang"
    ended = end_attempt(job, now, "preempted")
    relaunched = next_attempt(ended, JobSubstatus.PREEMPTED, now, note, job.spec.max_attempts)
    return relaunched.model_copy(update={"preemptions": job.preemptions})


def saved_state(job: JobDoc, attempt: int, step: int, checkpoint_uri: str | None = None) -> JobDoc:
    """An agent's report of the state an attempt saved as it stopped, come
    apart from its loss: after it (the reaper saw the VM gone, or a gang's
    noticed node reported with no step: only rank 0 saves), or, from a gang's
    node with no notice of its own, before it. The attempt's record keeps the
    newest step it was told (``vm_lost`` too), whatever order the reports
    came in: the next attempt resumes from the newest checkpoint. The job's
    ``checkpoint_uri`` follows, unless the job reported a later step since."""
    records = list(job.attempts)
    for i, record in enumerate(records):
        if record.attempt != attempt:
            continue
        if record.checkpoint_step is not None and record.checkpoint_step >= step:
            return job
        records[i] = record.model_copy(update={"checkpoint_step": step})
        update: dict[str, object] = {"attempts": records}
        if checkpoint_uri and step >= job.step:
            update["checkpoint_uri"] = checkpoint_uri
        return job.model_copy(update=update)
    return job


def _avoid_after_preemptions(job: JobDoc) -> JobDoc:
    limit = job.spec.fallback_after_preemptions
    machine_id = job.machine_id
    if not limit or machine_id is None or machine_id in job.avoid_machine_ids:
        return job
    lost_here = sum(
        1 for r in job.attempts if r.machine_id == machine_id and r.outcome == "preempted"
    )
    if lost_here < limit:
        return job
    return job.model_copy(update={"avoid_machine_ids": [*job.avoid_machine_ids, machine_id]})


def end_attempt(
    job: JobDoc, now: datetime, outcome: str, checkpoint_step: int | None = None
) -> JobDoc:
    """Close the current attempt's record: how it ended, and what it cost. A
    gang node's finish held for the notice (``gang_finish``) goes with it:
    the attempt ended otherwise (a preemption of another node, node 0's exit 0)."""
    # A step saved before the end stays (a gang's node replaced within the attempt).
    saved = {} if checkpoint_step is None else {"checkpoint_step": checkpoint_step}
    job = _update_attempt(job, ended_at=now, outcome=outcome, **saved)
    return accrue(job.model_copy(update={"held_finish": None}), now)


def accrue(job: JobDoc, now: datetime) -> JobDoc:
    """Price every attempt up to its end (a running one up to ``now``), and
    every VM no attempt recorded (``unrecorded_vms``), and sum them on the
    job, with what the same VM time would cost on demand."""
    records = [_priced(record, now) for record in job.attempts]
    unrecorded = [_priced(record, now) for record in job.unrecorded_vms]
    every = [*records, *unrecorded]
    cost = round(sum(r.cost_usd for r in every) + job.cooling_cost_usd, 6)
    on_demand = round(sum(r.on_demand_cost_usd for r in every), 6)
    return job.model_copy(
        update={
            "attempts": records,
            "unrecorded_vms": unrecorded,
            "cost_usd": cost,
            "on_demand_cost_usd": on_demand,
            "savings_percent": savings_percent(cost, on_demand),
            "cost_as_of": now,
        }
    )


def _priced(record: AttemptRecord, now: datetime) -> AttemptRecord:
    seconds = record.nodes * ((record.ended_at or now) - record.started_at).total_seconds()
    return record.model_copy(
        update={
            "cost_usd": round(vm_cost(record.price_per_hour, seconds), 6),
            "on_demand_cost_usd": round(vm_cost(record.on_demand_price_per_hour, seconds), 6),
        }
    )


def _update_attempt(job: JobDoc, **changes: object) -> JobDoc:
    """Change the current attempt's record (none yet: nothing to change)."""
    records = list(job.attempts)
    for i, record in enumerate(records):
        if record.attempt == job.attempt:
            records[i] = record.model_copy(update=changes)
            return job.model_copy(update={"attempts": records})
    return job


def instance_seen(
    instance: InstanceDoc, now: datetime, *, booted: bool = False, instance_id: str = ""
) -> InstanceDoc:
    """Record a sign of life: boot, heartbeat or epoch."""
    update: dict[str, object] = {"last_heartbeat_at": now, "updated_at": now}
    if booted and instance.booted_at is None:
        update["booted_at"] = now
    if instance_id and not instance.instance_id:
        update["instance_id"] = instance_id
    return instance.model_copy(update=update)


def instance_executing(instance: InstanceDoc, now: datetime) -> InstanceDoc:
    if instance.status != InstanceStatus.LAUNCHING:
        return instance
    return move_instance(instance, InstanceStatus.EXECUTING, now)


def instance_closing(instance: InstanceDoc, now: datetime, note: str) -> InstanceDoc:
    if instance.status in (InstanceStatus.CLOSING, InstanceStatus.CLOSED):
        return instance
    return move_instance(
        instance, InstanceStatus.CLOSING, now, InstanceSubstatus.TERMINATING, note=note
    )


def instance_closed(
    instance: InstanceDoc,
    now: datetime,
    note: str = "deleted",
    substatus: InstanceSubstatus = InstanceSubstatus.TERMINATED,
    rule: CoolingRule | None = None,
) -> InstanceDoc:
    """CLOSED (TERMINATED, or PREEMPTED), with the VM's cost up to now.

    A CLOSING instance was running or cooling until it began closing: the
    segment is priced as running (the reaper closes cooling ones directly).
    """
    if instance.status == InstanceStatus.CLOSED:
        return instance
    last = segment_cost(instance, now, rule or CoolingRule())
    closed = move_instance(instance, InstanceStatus.CLOSED, now, substatus, note=note)
    return closed.model_copy(update={"cost_usd": round(instance.cost_usd + last, 6)})
