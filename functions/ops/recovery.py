"""When a job's VM is lost (preempted, vanished, stalled): close the attempt,
start the next one at once, and leave a queue entry as the reaper's safety net.

Shared by on_spot_preempted (the event-driven path) and the reaper (missed
preemptions and stalls). Re-entrant: every step checks what is already done.
"""

from __future__ import annotations

from datetime import datetime

from spotline.functions.deps import Deps
from spotline.functions.ops.gang_rules import end_rule
from spotline.functions.ops.jobs import settle
from spotline.functions.ops.node_replacement import gang_stopped, lost_node_saved, replace_node
from spotline.functions.ops.relaunch import replace_attempt
from spotline.functions.ops.restore_gate import open_restore_gate
from spotline.functions.ops.slots import free_instance_slot
from spotline.functions.ops.teardown import (
    Release,
    release_instance,
    release_instances,
)
from spotline.shared import logs
from spotline.shared.contract.events import PreemptionNotice
from spotline.shared.domain import (
    failure_policy,
    gang_finish,
    late_finish,
    lifecycle,
    node_replacement,
    nothing_saved,
    pending_nodes,
)
from spotline.shared.domain.documents import InstanceDoc, JobDoc, QueueReason
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.liveness import Owner, belongs_to, if_owned
from spotline.shared.domain.states import (
    InstanceStatus,
    InstanceSubstatus,
    JobStatus,
    JobSubstatus,
)


def recover(
    deps: Deps,
    instance: InstanceDoc,
    cause: JobSubstatus,
    now: datetime,
    note: str,
    *,
    step: int | None = None,
    checkpoint_uri: str | None = None,
    delete_vm: bool = True,
    generation: int | None = None,
) -> JobDoc | None:
    """Move the job to its next attempt, then place it while ``instance``
    (and a gang's other nodes) are deleted (``replace_attempt``).

    The loss is written on the job first, so a crash at any later point is
    finished by the reaper: the instance its job no longer owns is released
    (or finished closing), and the job left in REQUESTING_SERVER is placed
    again. (Closed first, the instance dropped out of the reaper's sight
    while its job went on TRAINING on it, holding its slot for ever.)

    Args:
        cause: PREEMPTED or STALLED.
        delete_vm: False while a preempted VM may still be saving its state
            (the log-sink event fires at the start of the 30 s notice).
        generation: the gang's generation the VM's agent last joined, as
            its report says (``node_replacement.lost``).

    Raises:
        StaleEvent: the job is already past this VM (a duplicate report); the
            instance is left as it is.
    """
    store = deps.store
    job = store.update_job(
        instance.job_id,
        lambda current: node_replacement.lost(
            current, instance.name, instance.attempt, cause, now, note, step, checkpoint_uri,
            saved=delete_vm,
            # Never seen training: its trainer never started, so its gang never stepped.
            started=instance.status != InstanceStatus.LAUNCHING,
            generation=generation,
        ),
    )  # fmt: skip
    if job is None:
        raise PermanentError(f"instance {instance.name} belongs to unknown job {instance.job_id}")
    substatus = (
        InstanceSubstatus.PREEMPTED
        if cause == JobSubstatus.PREEMPTED
        else InstanceSubstatus.TERMINATED
    )
    # Every instance write is for the lost attempt only (if_owned, owner=): a
    # VM another job holds since the caller read it is not that job's loss.
    owner = Owner.of(instance)
    releases: list[Release] = []
    if delete_vm:
        releases.append(Release(instance.name, note, substatus, owner))
    else:

        def close(current: InstanceDoc) -> InstanceDoc:
            return lifecycle.instance_closed(current, now, note, substatus)

        closed = store.update_instance(instance.name, if_owned(owner, close))
        # Its slot goes to the next attempt: Compute Engine takes the VM within
        # the 30 s notice, so the user may hold one VM over the quota till then.
        if closed is not None and belongs_to(closed, owner):
            free_instance_slot(deps, instance.user, instance.name, now)
    replacing = pending_nodes.of_lost(job, instance.name)
    if replacing is not None and job.attempt == instance.attempt:
        # One node of a gang lost: the others stay, one VM replaces it.
        logs.warning(
            f"job {job.job_id}: {instance.name} {cause.lower()} ({note}); "
            f"replacing it with {replacing.replacement}",
            job_id=job.job_id,
            instance=instance.name,
        )
        return replace_node(deps, job, releases, now)
    # A gang restarts whole: the other nodes of the lost attempt go too, all
    # deleted together (one after another, a gang of 4 waited for 4 deletes
    # in a row: minutes of makespan), and the next attempt is placed while
    # they go (``replace_attempt``).
    for node in store.instances_of_job(instance.job_id):
        if (
            node.attempt == instance.attempt
            and node.name != instance.name
            and node.status in InstanceStatus.live()
        ):
            gone = f"its gang lost {instance.name}"
            releases.append(Release(node.name, gone, owner=Owner.of(node)))
    logs.warning(
        f"job {job.job_id}: {instance.name} {cause.lower()} ({note}); now {job.status}/"
        f"{job.substatus}, attempt {job.attempt}",
        job_id=job.job_id,
        instance=instance.name,
    )
    settle(deps, job, now)
    reason: QueueReason = "preempted" if cause == JobSubstatus.PREEMPTED else "stalled"
    return replace_attempt(deps, job, releases, reason, now)


def restart(deps: Deps, job: JobDoc, attempt: int, now: datetime) -> JobDoc:
    """The failure policy restarted the job after ``attempt`` exited non-zero
    (written on the job first, as a loss is): that attempt's VMs go, every
    node of a gang, and the next attempt is placed, resuming from the last
    checkpoint. A crash in between is finished by the reaper, as after a loss:
    the VMs no attempt owns are released, the job in REQUESTING_SERVER placed."""
    note = f"attempt {attempt} exited with an error; restarting"
    releases = [
        Release(node.name, note, owner=Owner.of(node))
        for node in deps.store.instances_of_job(job.job_id)
        if node.attempt == attempt and node.status in InstanceStatus.live()
    ]
    return replace_attempt(deps, job, releases, "errored", now)


def judge_held_finish(deps: Deps, job_id: str, now: datetime) -> str | None:
    """Judge a gang node's non-zero exit held past the notice window
    (``spotline.shared.domain.gang_finish``), the job written first: restarted
    by the failure policy (the attempt's nodes go, the next attempt is
    placed), or FAILED (every node of the attempt goes). A crash in between
    is finished as after any restart or end: the reaper releases VMs no live
    attempt owns and places a job left requesting. None: nothing was held
    past its window (a preemption of the attempt came, or another sweep
    judged it)."""
    store = deps.store
    before = store.get_job(job_id)
    if before is None or before.held_finish is None:
        return None
    attempt = before.held_finish.event.attempt
    job = store.update_job(job_id, lambda current: gang_finish.judge(current, now))
    if job is None:
        return None
    if failure_policy.restarted_after(job, attempt):
        restart(deps, job, attempt, now)
        return "gang_restarted"
    if job.status != JobStatus.FAILED or job.attempt != attempt:
        return None
    note = f"job failed: {job.error or 'its trainer exited with an error'}"
    releases = [
        Release(node.name, note, owner=Owner.of(node))
        for node in store.instances_of_job(job_id)
        if node.attempt == attempt and node.status in InstanceStatus.live()
    ]
    release_instances(deps, releases, now)
    settle(deps, job, now)
    return "gang_failed"


def preempted(deps: Deps, instance: InstanceDoc, notice: PreemptionNotice, now: datetime) -> None:
    """A preemption report (the agent's or the log sink's): recover the job.

    Raises:
        StaleEvent: recorded already (by the other reporter, or by the reaper
            when the VM vanished before this report came); the report's saved
            step is still recorded on the lost attempt, and after the log
            sink's report the VM kept through its notice goes (its state is saved).
    """
    if notice.gang_stop:
        _saved(deps, instance, notice)
        return
    source = "the agent" if notice.source == "agent" else "the preemption log"
    try:
        recover(
            deps,
            instance,
            JobSubstatus.PREEMPTED,
            now,
            note=f"{instance.name} preempted (reported by {source})",
            step=notice.step,
            checkpoint_uri=notice.checkpoint_uri,
            # The log entry comes at the start of the notice: let the VM save its state.
            delete_vm=notice.source == "agent",
            generation=notice.generation,
        )
    except lifecycle.StaleEvent:
        _saved(deps, instance, notice)
        _nothing_saved(deps, instance, notice)
        if notice.source == "agent":
            _end_notice(deps, instance.name)
            # A gang's lost node 0 reported by the log sink first: saved now.
            lost_node_saved(deps, instance.job_id, instance.name, instance.attempt)
        raise
    _nothing_saved(deps, instance, notice)


def _nothing_saved(deps: Deps, instance: InstanceDoc, notice: PreemptionNotice) -> None:
    """Say on the job when the agent's report shows it never saved (``nothing_saved``)."""
    if notice.source == "agent" and notice.mirrored_checkpoints is not None:
        deps.store.update_job(
            instance.job_id, lambda job: nothing_saved.after_preemption(job, notice)
        )


def _saved(deps: Deps, instance: InstanceDoc, notice: PreemptionNotice) -> None:
    """Keep the step an attempt saved on its record (``lifecycle.saved_state``).

    A gang's node with no notice of its own that stopped with its gang says
    so here (``gang_stop``), and nothing else is done for it: the noticed
    node's report, the log sink's or the reaper's sight of that VM gone
    records the loss and lets every node go. Its delete is graceful, so node
    0, still saving when it comes, gets the agent unit's stop timeout to end.
    """
    step, uri = notice.step, notice.checkpoint_uri
    if notice.gang_stop:
        # Kept as the gang's stop too: node 0's is the save a regroup waits for.
        gang_stopped(
            deps, instance.job_id, instance.name, instance.attempt, step, uri, notice.generation
        )
        return
    if step is None:
        return
    deps.store.update_job(
        instance.job_id, lambda job: lifecycle.saved_state(job, instance.attempt, step, uri)
    )


def _end_notice(deps: Deps, name: str) -> None:
    """The log sink's report closed the instance PREEMPTED and kept the VM
    through its notice (the reaper leaves it that long); the agent's report
    says its state is saved, so the VM need not wait for Compute Engine."""
    current = deps.store.get_instance(name)
    if current is not None and current.substatus == InstanceSubstatus.PREEMPTED:
        deps.compute.delete(current.zone, current.name)
        open_restore_gate(deps, current.job_id, deps.clock(), gone=[current.name])
        end_rule(deps, current.job_id, current.attempt)  # a gang's, once its last node went


def release_superseded(deps: Deps, job: JobDoc, now: datetime) -> None:
    """The job completed on an attempt whose loss was recorded first
    (``spotline.shared.domain.late_finish``): the later attempt started meanwhile goes,
    its VMs deleted and its queue entry dropped. Re-entrant; the reaper does the
    same if this process dies (nothing live owns them: the job has ended)."""
    if not late_finish.ended_after_loss(job):
        return
    store = deps.store
    note = f"attempt {job.attempt} had completed"
    for instance in store.instances_of_job(job.job_id):
        if instance.attempt > job.attempt and instance.status in InstanceStatus.live():
            release_instance(deps, instance.name, now, note, owner=Owner.of(instance))
    entry = store.get_queue(job.job_id)
    if entry is not None and entry.attempt > job.attempt:
        store.delete_queue(job.job_id)
