"""A gang loses one node, not its attempt: the lost node is replaced. Pure.

When one node of a gang that is training is preempted, its other nodes (the
survivors) have stopped their ranks at the step the gang agreed on, rank 0
saving it (the gang's stop on a notice). Rather than delete them and place N
new VMs, spotline keeps them and inserts one VM for the lost node's rank, in
the gang's zone, under a new name (``placement.replacement_name``). The
survivors' agents wait; once the replacement has booted and node 0's save is
complete, the gang regroups: every node is told the new node list (its
generation, hosts and rendezvous port) and restarts its ranks from the save.

The orders of events, each with one defined end:

* ``lost``: the loss of a node of a training gang (``replaces``) keeps the
  attempt: REPLACING_NODE, the job's node list naming the replacement. Any
  other loss (a single VM, a gang still setting up, ``replace_node_timeout_s``
  0, a finish held for judging) ends the attempt as ``lifecycle.vm_lost`` does.
* a second node's loss while replacing, or the replacement's own: the gang is
  relaunched whole (``lifecycle.vm_lost``: the attempt ends, counted as a
  preemption like any);
* a late, duplicate or reordered report of the lost node: stale (the lost VM
  is no longer one of the job's nodes); the step it saved is still recorded
  (``lifecycle.saved_state``);
* a survivor's stop report (``stopped``) before or after the loss: kept on the
  job (``gang_stops``); node 0's is the save the regroup waits for;
* no regroup within ``replace_node_timeout_s`` of the loss (no capacity, a
  slow boot): ``overdue``, and the gang is relaunched whole (``abandon``);
* a node's non-zero exit while replacing: that node will not regroup, so the
  gang is relaunched whole too (``lifecycle.finished``); node 0's exit 0
  completes the job as ever.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from spotline.shared.domain import failure_policy, lifecycle
from spotline.shared.domain.documents import JobDoc, NodeReplacement
from spotline.shared.domain.liveness import NOTICE_MARGIN_S, PREEMPTION_NOTICE_S
from spotline.shared.domain.placement import replacement_name
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.transitions import move_job

S = JobSubstatus
# The frameworks whose nodes restart their ranks on a regroup (the agent's
# ``regroup``), each shown to on the local stack; a gang of another framework
# (``jax``) is relaunched whole.
REPLACEABLE_FRAMEWORKS = frozenset({"pytorch", "command", "xgboost", "ray"})


def replaces(job: JobDoc, instance: str, attempt: int, cause: S) -> bool:
    """Whether the loss of ``instance`` is one node's, replaced within the attempt:
    a preemption of a node of the current attempt of a gang that is training
    (of a framework whose nodes can regroup), with no replacement under way
    and no finish held for judging."""
    return (
        cause == S.PREEMPTED
        and job.spec.replace_node_timeout_s > 0
        and job.spec.framework in REPLACEABLE_FRAMEWORKS
        and len(job.nodes) > 1
        and attempt == job.attempt
        and instance in job.nodes
        and job.substatus == S.TRAINING
        and job.replacing is None
        and job.held_finish is None
        and failure_policy.preemption_limit(job, "") is None
    )


def lost(
    job: JobDoc,
    instance: str,
    attempt: int,
    cause: S,
    now: datetime,
    note: str,
    step: int | None = None,
    checkpoint_uri: str | None = None,
    *,
    saved: bool = False,
) -> JobDoc:
    """The job after a VM's loss: one node replaced (``replaces``), or the
    attempt ended (``lifecycle.vm_lost``).

    Args:
        saved: the report comes from the lost VM's agent after its save
            (the log sink's comes at the start of the notice).

    Raises:
        lifecycle.StaleEvent: as ``lifecycle.vm_lost``.
    """
    if not replaces(job, instance, attempt, cause):
        return lifecycle.vm_lost(job, instance, attempt, cause, now, note, step, checkpoint_uri)
    if step is not None:
        job = lifecycle.saved_state(job, attempt, step, checkpoint_uri)
    rank = job.nodes.index(instance)
    generation = job.gang_generation + 1
    new = replacement_name(job.job_id, job.attempt, rank, generation)
    nodes = [*job.nodes[:rank], new, *job.nodes[rank + 1 :]]
    replacing = NodeReplacement(
        rank=rank,
        lost=instance,
        replacement=new,
        since=now,
        # Node 0's save: its own report after saving, or a surviving node 0's stop report.
        saved=(rank == 0 and saved) or (rank != 0 and job.nodes[0] in job.gang_stops),
    )
    records = [
        r.model_copy(update={"node_names": nodes}) if r.attempt == job.attempt else r
        for r in job.attempts
    ]
    moved = move_job(job, S.REPLACING_NODE, now, note=f"{note}; replacing it with {new}")
    return moved.model_copy(
        update={
            "preemptions": job.preemptions + 1,
            "nodes": nodes,
            "instance": nodes[0],
            "replacing": replacing,
            "gang_generation": generation,
            "gang_stops": [n for n in job.gang_stops if n in nodes],
            "attempts": records,
        }
    )


def stopped(
    job: JobDoc, instance: str, attempt: int, step: int | None, checkpoint_uri: str | None
) -> JobDoc:
    """A node of the gang stopped with it (another node's notice), its save
    (node 0's) complete: the step is kept on the attempt, and the node on
    ``gang_stops`` while it is one of the current attempt's."""
    if step is not None:
        job = lifecycle.saved_state(job, attempt, step, checkpoint_uri)
    if attempt != job.attempt or instance not in job.nodes or instance in job.gang_stops:
        return job
    update: dict[str, object] = {"gang_stops": [*job.gang_stops, instance]}
    replacing = job.replacing
    if replacing is not None and instance == job.nodes[0]:
        update["replacing"] = replacing.model_copy(update={"saved": True})
    return job.model_copy(update=update)


def lost_node_saved(job: JobDoc, instance: str, attempt: int) -> JobDoc:
    """The lost node's agent reported its save after its loss was recorded
    (the log sink's report came first): a lost node 0's save is complete."""
    replacing = job.replacing
    if replacing is None or attempt != job.attempt or replacing.lost != instance:
        return job
    if replacing.rank != 0:
        return job
    return job.model_copy(update={"replacing": replacing.model_copy(update={"saved": True})})


def booted(job: JobDoc, instance: str, attempt: int) -> JobDoc:
    """The replacement's agent is up."""
    replacing = job.replacing
    if replacing is None or attempt != job.attempt or replacing.replacement != instance:
        return job
    return job.model_copy(update={"replacing": replacing.model_copy(update={"booted": True})})


def ready(job: JobDoc, now: datetime) -> bool:
    """Whether the gang can regroup: the replacement is up, and node 0's save
    is complete (its report came, or a lost node 0's notice is over: Compute
    Engine has taken it, whatever it was writing)."""
    replacing = job.replacing
    if replacing is None or job.substatus != S.REPLACING_NODE or not replacing.booted:
        return False
    notice_over = replacing.since + timedelta(seconds=PREEMPTION_NOTICE_S + NOTICE_MARGIN_S)
    return replacing.saved or (replacing.rank == 0 and now >= notice_over)


def regrouped(job: JobDoc, now: datetime) -> JobDoc:
    """The gang regrouped with its replacement: training again, on the same
    attempt. Unchanged unless ``ready`` (a second regroup is a no-op)."""
    replacing = job.replacing
    if replacing is None or not ready(job, now):
        return job
    note = f"{replacing.replacement} joined; the gang restarts from its last save"
    moved = move_job(job, S.TRAINING, now, note=note)
    return moved.model_copy(update={"replacing": None, "gang_stops": []})


def overdue(job: JobDoc, now: datetime) -> bool:
    """Whether the replacement has not joined within ``replace_node_timeout_s``."""
    replacing = job.replacing
    if replacing is None or job.substatus != S.REPLACING_NODE:
        return False
    bound = timedelta(seconds=job.spec.replace_node_timeout_s)
    return now >= replacing.since + bound


def abandon(job: JobDoc, now: datetime, why: str) -> JobDoc:
    """The replacement given up (``why``): the gang is relaunched whole
    (``lifecycle.relaunch_gang``). Unchanged unless a replacement is under way."""
    return lifecycle.relaunch_gang(job, now, why)


def relaunched_after(job: JobDoc, attempt: int) -> bool:
    """Whether the job relaunched its gang after ``attempt``, which was
    replacing a node: that attempt's VMs are to go, the next one placed."""
    return job.attempt == attempt + 1 and any(
        h.attempt == attempt and h.substatus == S.REPLACING_NODE for h in job.history
    )
