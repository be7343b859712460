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
  other loss (a single VM, a gang still being placed, ``replace_node_timeout_s``
  0, a finish held for judging) ends the attempt as ``lifecycle.vm_lost`` does.
* ``lost`` while the gang sets up (``states.SETTING_UP``: its VMs recorded, no
  node reported training), or of a node whose trainer never started
  (``started``: a gang steps with every node, so its others wait in their
  rendezvous): replaced the same way, with nothing to save; the gang
  regroups once the replacement is up and goes back to that step of setting
  up. Its nodes take the regroup before their trainers start, or have their
  ranks (waiting in a rendezvous with the lost node) started again with it.
  An epoch or a stop
  with the gang heard before the regroup (``trained``): the gang was training
  after all, and the regroup waits for node 0's save as for a training gang.
* another node's loss while the gang waits (node 0's too), or the
  replacement's own before it joined: replaced too, the attempt kept
  (``further_losses``, ``gang_resize.replaces_again``), and the gang
  regroups once every replacement is up; relaunched whole
  (``lifecycle.vm_lost``: the attempt ends, counted as a preemption like
  any) once no node of the gang as it trained is left, at
  ``max_preemptions``, or with a finish held;
* a node lost after the gang regrouped, before it rejoined (its agent's own
  report names an older generation): the gang has not stepped since, so
  the save it regrouped from stands and no new one is waited for. Heard
  with no generation (from the log sink alone, or the reaper), no step of
  the gang heard since the regroup (``maybe_behind``): had it rejoined,
  the gang's ranks stopped with it within its notice, so node 0's stop is
  waited for until the notice's end, and with no stop of the gang heard
  by then the save it regrouped from stands;
* a node lost whose trainer was never seen started, after an epoch of the
  gang was heard (``JobDoc.gang_stepped``): that step took its ranks too,
  so node 0's save at the survivors' stop is waited for;
* a late, duplicate or reordered report of the lost node: stale (the lost VM
  is no longer one of the job's nodes); the step it saved is still recorded
  (``lifecycle.saved_state``), and so is an epoch it reported, while it moves
  the job forward (``late_epochs``);
* two handlers planning the regroup at once (a survivor's stop report and
  the replacement's boot, a redelivery, the reaper's sweep): the regroup is
  written on the job before any node is told (``recorded``), so the second
  plans from the job that shows the first (the next generation, if any),
  and a loss heard while the nodes are told is one after the regroup;
* a survivor's stop report (``stopped``) before or after the loss: kept on the
  job (``gang_stops``); node 0's is the save the regroup waits for;
* no regroup within ``replace_node_timeout_s`` of the loss (no capacity, a
  slow boot): ``overdue``, and the gang is relaunched whole (``abandon``);
* a node's non-zero exit while replacing: that node will not regroup, so the
  gang is relaunched whole too (``lifecycle.finished``); node 0's exit 0
  completes the job as ever.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from spotline.shared.domain import (
    failure_policy,
    further_losses,
    gang_resize,
    lifecycle,
    pending_nodes,
)
from spotline.shared.domain.documents import (
    AttemptRecord,
    JobDoc,
    NodeReplacement,
    PendingNode,
    ReplacedNode,
    TellingRegroup,
)
from spotline.shared.domain.liveness import NOTICE_MARGIN_S, PREEMPTION_NOTICE_S
from spotline.shared.domain.placement import replacement_name
from spotline.shared.domain.spec import REPLACEABLE_FRAMEWORKS
from spotline.shared.domain.states import SETTING_UP, JobSubstatus
from spotline.shared.domain.transitions import move_job

S = JobSubstatus


def replaces(job: JobDoc, instance: str, attempt: int, cause: S) -> bool:
    """Whether the loss of ``instance`` is one node's, replaced within the attempt:
    a preemption of a node of the current attempt of a gang that is training
    or setting up (of a framework whose nodes can regroup), with no
    replacement under way and no finish held for judging."""
    return (
        cause == S.PREEMPTED
        and job.spec.replace_node_timeout_s > 0
        and job.spec.framework in REPLACEABLE_FRAMEWORKS
        and len(job.nodes) > 1
        and attempt == job.attempt
        and instance in job.nodes
        and (job.substatus == S.TRAINING or job.substatus in SETTING_UP)
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
    started: bool = True,
    generation: int | None = None,
) -> JobDoc:
    """The job after a VM's loss: one node replaced (``replaces``), or the
    attempt ended (``lifecycle.vm_lost``).

    Args:
        saved: the report comes from the lost VM's agent after its save
            (the log sink's comes at the start of the notice).
        started: whether the lost VM's trainer may have started (its
            instance was seen training). False: the gang never trained, as
            a step takes every node's ranks, whatever the job reads: its
            other nodes' ranks wait in their rendezvous with it.
        generation: the gang's generation the lost VM's agent last joined
            (its own report; None: not said). Older than the gang's: it
            never rejoined the last regroup, so the gang has not stepped
            since, and the save it regrouped from stands (nothing to wait for).

    Raises:
        lifecycle.StaleEvent: as ``lifecycle.vm_lost``.
    """
    if gang_resize.replaces_again(job, instance, attempt, cause):
        return gang_resize.replacement_lost(job, instance, now, note, step, checkpoint_uri)
    if gang_resize.loses_again(job, instance, attempt, cause):
        return gang_resize.lost_again(
            job, instance, now, note, step, checkpoint_uri, saved=saved, generation=generation
        )
    if further_losses.replaces_another(job, instance, attempt, cause):
        if step is not None:  # the lost node saved: the gang was training
            job = trained(job)
        return further_losses.another_lost(
            job, instance, now, note, step, checkpoint_uri, saved=saved
        )
    if not replaces(job, instance, attempt, cause):
        return lifecycle.vm_lost(job, instance, attempt, cause, now, note, step, checkpoint_uri)
    if step is not None:
        job = lifecycle.saved_state(job, attempt, step, checkpoint_uri)
    rank = job.nodes.index(instance)
    # Setting up, nothing was trained: no save to wait for, unless the lost
    # node's report says it saved, or a node's stop with the gang or an
    # epoch was heard (``trained``; the gang's training reports are late:
    # the lost node's own may not have come).
    setting_up = job.substatus if job.substatus in SETTING_UP or not started else None
    stepped = step is not None or bool(job.gang_stops) or job.gang_stepped
    setting_up = None if stepped else setting_up
    # Its agent never rejoined the last regroup: the gang has not stepped since.
    behind = generation is not None and generation < job.gang_generation
    # Unsaid (the log sink's report, the reaper's sight of it gone): it may
    # not have rejoined (``maybe_behind``).
    unsaid = generation is None and job.gang_generation > 0 and not stepped
    generation = job.gang_generation + 1
    new = replacement_name(job.job_id, job.attempt, rank, generation)
    nodes, records = pending_nodes.renamed(job, rank, new)
    replacing = NodeReplacement(
        rank=rank,
        lost=instance,
        replacement=new,
        since=now,
        # Node 0's save: its own report after saving, or a surviving node 0's stop report.
        saved=(
            setting_up is not None
            or (rank == 0 and saved)
            or (rank != 0 and job.nodes[0] in job.gang_stops)
            or behind
        ),
        setting_up=setting_up,
        maybe_behind=unsaid and setting_up is None,
    )
    replaced = job.model_copy(
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
    # Moved once changed: its event counts this preemption, as a further loss's does.
    return move_job(replaced, S.REPLACING_NODE, now, note=f"{note}; replacing it with {new}")


def placed(job: JobDoc, name: str, instance_id: str | None, now: datetime) -> JobDoc:
    """The replacement VM ``name`` exists (``instance_id``: Compute Engine's id): the
    attempt's record names it beside the lost node, and its log query finds
    every VM the attempt ran on, the lost one and the replacement included.
    Unchanged unless a replacement is under way, or when it is recorded already."""
    node = pending_nodes.of_replacement(job, name)
    if node is None:
        return job
    records = [
        _with_replacement(r, job.job_id, node, instance_id, now) if r.attempt == job.attempt else r
        for r in job.attempts
    ]
    return job.model_copy(update={"attempts": records})


def _with_replacement(
    record: AttemptRecord,
    job_id: str,
    replacing: PendingNode,
    instance_id: str | None,
    now: datetime,
) -> AttemptRecord:
    if any(r.replacement == replacing.replacement for r in record.replaced_nodes):
        return record
    ids = list(record.node_ids)
    rank = replacing.rank
    lost_id = ids[rank] if rank < len(ids) else None
    if rank < len(ids):
        ids[rank] = instance_id or ""
    swapped = ReplacedNode(
        rank=rank,
        lost=replacing.lost,
        lost_instance_id=lost_id or None,
        replacement=replacing.replacement,
        instance_id=instance_id or None,
        at=now,
    )
    replaced = [*record.replaced_nodes, swapped]
    # Every VM of the attempt, those replaced too: their logs are the attempt's.
    # A record without its nodes' ids (made before they were kept) is found
    # by the job and attempt labels alone.
    every = [*ids, *(r.lost_instance_id or "" for r in replaced)]
    query = lifecycle.logs_query(every if ids else [""], job_id, record.attempt)
    return record.model_copy(
        update={"node_ids": ids, "replaced_nodes": replaced, "logs_query": query}
    )


def stopped(
    job: JobDoc,
    instance: str,
    attempt: int,
    step: int | None,
    checkpoint_uri: str | None,
    generation: int | None = None,
) -> JobDoc:
    """A node of the gang stopped with it (another node's notice, or the
    request to grow back), its save (the head's) complete: the step is kept
    on the attempt, and the node on ``gang_stops`` while it is one of the
    current attempt's and not a replacement yet to join (its trainer never
    trained with the gang), for the loss at hand (``generation``: the gang's when
    the node stopped; None: not said). A late copy of a stop for an earlier
    loss is no save for this one; once an elastic gang shrank, only a stop of
    the smaller gang (its generation) counts."""
    if step is not None:
        job = lifecycle.saved_state(job, attempt, step, checkpoint_uri)
    if _lost_head_stopped(job, instance, attempt, generation):
        return lost_node_saved(trained(job), instance, attempt)
    if attempt != job.attempt or instance not in job.nodes or instance in job.gang_stops:
        return job
    if instance in pending_nodes.replacements(job):
        return job  # not joined: it never trained with the gang, and saved nothing of it
    replacing = job.replacing
    if replacing is not None and replacing.shrunk:
        if generation != job.gang_generation:
            return job
    elif generation is not None and generation < _stopping_generation(job):
        return job  # a late copy of its stop for a loss the gang regrouped after
    # Its ranks stopped with the gang: it was training after all (``trained``).
    job = trained(job)
    replacing = job.replacing
    update: dict[str, object] = {"gang_stops": [*job.gang_stops, instance]}
    # Not the next node's while a smaller gang's lost head's save is awaited.
    if replacing is not None and instance == gang_resize.head(job) and not replacing.lost_head:
        update["replacing"] = replacing.model_copy(update={"saved": True})
    return job.model_copy(update=update)


def _lost_head_stopped(job: JobDoc, instance: str, attempt: int, generation: int | None) -> bool:
    """Whether ``instance`` is node 0 lost after it stopped with its waiting
    gang (``further_losses``), and its stop report is for that stop, heard late."""
    replacing = job.replacing
    if replacing is None or replacing.shrunk or attempt != job.attempt:
        return False
    node = pending_nodes.of_trained_lost(job, instance)
    if node is None or node.rank != 0:
        return False
    return generation is None or generation >= _stopping_generation(job)


def trained(job: JobDoc) -> JobDoc:
    """A node of the gang reported an epoch, or its stop with the gang, while
    a node lost as it set up is replaced: the gang was training (its reports
    were still on their way when the loss came), so the regroup waits for
    node 0's save as for a training gang. Unchanged unless such a
    replacement is under way."""
    replacing = job.replacing
    if replacing is None or replacing.setting_up is None:
        return job
    # A lost node 0 reported no save (else the gang was not setting up): its
    # notice's end is waited for (``save_complete``).
    saved = not pending_nodes.head_lost(replacing) and job.nodes[0] in job.gang_stops
    return job.model_copy(
        update={"replacing": replacing.model_copy(update={"setting_up": None, "saved": saved})}
    )


def epoch_heard(job: JobDoc, instance: str, step: int) -> JobDoc:
    """An epoch of ``instance``'s at ``step`` heard (``late_epochs.epoch_done``
    applied): the gang was training (``trained``); and, from one of the
    gang's nodes past the newest save of its attempt (the one a regroup
    restores), it stepped since it was placed or last regrouped
    (``JobDoc.gang_stepped``). A replaced node's late epoch, or one made
    before the stop a regroup restored from, says nothing of the gang since."""
    if instance in job.nodes and not job.gang_stepped and step > _saved_step(job):
        job = job.model_copy(update={"gang_stepped": True})
    return trained(job)


def _saved_step(job: JobDoc) -> int:
    """The newest step the current attempt saved (-1: none)."""
    steps = [r.checkpoint_step for r in job.attempts if r.attempt == job.attempt]
    return max((step for step in steps if step is not None), default=-1)


def _stopping_generation(job: JobDoc) -> int:
    """The generation a node runs in when it stops for the loss at hand: the
    one before the loss's replacement while replacing (further losses moved
    it on: the one kept), else the gang's own (a stop heard before the loss
    it is for)."""
    replacing = job.replacing
    if replacing is None:
        return job.gang_generation
    if replacing.stopped_generation is not None:
        return replacing.stopped_generation
    return job.gang_generation - 1


def lost_node_saved(job: JobDoc, instance: str, attempt: int) -> JobDoc:
    """The lost node's agent reported its save after its loss was recorded
    (the log sink's report came first): a lost node 0's save is complete,
    its replacements lost since or not. Not a lost replacement's (it never
    trained)."""
    replacing = job.replacing
    node = pending_nodes.of_trained_lost(job, instance)
    if replacing is None or node is None or attempt != job.attempt:
        return job
    if replacing.shrunk:  # the smaller gang's head's, lost at its stop
        if replacing.lost_head != instance:
            return job
    elif node.rank != 0:
        return job
    return job.model_copy(update={"replacing": replacing.model_copy(update={"saved": True})})


def insert_refused(job: JobDoc, replacement: str, now: datetime) -> JobDoc:
    """The replacement's insert was refused for capacity at ``now``."""
    replacing = job.replacing
    node = pending_nodes.of_replacement(job, replacement)
    if replacing is None or node is None:
        return job
    refused = pending_nodes.updated(
        replacing, replacement, refused_at=now, refusals=node.refusals + 1
    )
    return job.model_copy(update={"replacing": refused})


def booted(job: JobDoc, instance: str, attempt: int) -> JobDoc:
    """The replacement's agent is up."""
    replacing = job.replacing
    node = pending_nodes.of_replacement(job, instance)
    if replacing is None or node is None or attempt != job.attempt:
        return job
    if node.booted:  # each of its heartbeats says so again
        return job
    return job.model_copy(
        update={"replacing": pending_nodes.updated(replacing, instance, booted=True)}
    )


def save_complete(job: JobDoc, now: datetime) -> bool:
    """Whether the head's save at the gang's stop is complete: its report
    came, or a lost node 0's notice is over (Compute Engine has taken it,
    whatever it was writing)."""
    replacing = job.replacing
    if replacing is None:
        return False
    if replacing.saved:
        return True
    # ``since``: the latest loss, so no earlier than the head's.
    notice_over = replacing.since + timedelta(seconds=PREEMPTION_NOTICE_S + NOTICE_MARGIN_S)
    if replacing.shrunk:
        head_lost = replacing.lost_head is not None
    else:
        head_lost = pending_nodes.head_lost(replacing)
    # A node lost that may not have rejoined, and no stop or step of the
    # gang heard by the notice's end: it never stepped since it regrouped.
    unstepped = replacing.maybe_behind and not job.gang_stops and not job.gang_stepped
    return (head_lost or unstepped) and now >= notice_over


def ready(job: JobDoc, now: datetime) -> bool:
    """Whether the gang can regroup at its full size: the replacement is up,
    and the head's save is complete (an elastic gang that shrank: its save
    at the stop it was asked for)."""
    replacing = job.replacing
    if replacing is None or job.substatus != S.REPLACING_NODE:
        return False
    return pending_nodes.all_booted(replacing) and save_complete(job, now)


@dataclass(frozen=True)
class RegroupPlan:
    """A regroup to record (``recorded``), then tell the gang's nodes."""

    replacement: str  # the replacement it is for
    base: int  # the job's gang generation it was planned from
    generation: int  # the node list's generation it makes
    nodes: tuple[str, ...]  # the gang's nodes by rank, after it
    shrink: bool  # the survivors alone (``gang_resize``), or the whole gang


def plan(job: JobDoc, now: datetime) -> RegroupPlan | None:
    """The regroup the gang is ready for: the whole gang (``ready``), or an
    elastic gang's survivors (``gang_resize.shrinks``); None: neither yet."""
    replacing = job.replacing
    if replacing is None:
        return None
    base = job.gang_generation
    if ready(job, now):
        # The replacement was made for this generation, unless the gang shrank since.
        generation = base + 1 if replacing.shrunk else base
        return RegroupPlan(replacing.replacement, base, generation, tuple(job.nodes), False)
    if gang_resize.shrinks(job, save_complete(job, now)):
        survivors = tuple(gang_resize.survivors(job))
        return RegroupPlan(replacing.replacement, base, base + 1, survivors, True)
    return None


def recorded(job: JobDoc, now: datetime) -> JobDoc:
    """The regroup the gang is ready for (``plan``) written on the job before
    any node is told of it: the job as ``regrouped`` makes it, and the
    regroup to tell (``JobDoc.telling``). Written in one guarded update, so
    two handlers planning at once record two regroups in turn, the second
    planned from the job that shows the first (never two node lists under
    one generation), and a loss heard while the nodes are told is one after
    the regroup (its save is waited for anew). Unchanged while a regroup
    recorded earlier is not told yet (it is told first), or none is ready."""
    if job.telling is not None:
        return job
    planned = plan(job, now)
    if planned is None:
        return job
    telling = TellingRegroup(
        generation=planned.generation, nodes=list(planned.nodes), shrink=planned.shrink
    )
    return regrouped(job, planned, now).model_copy(update={"telling": telling})


def told(job: JobDoc, generation: int) -> JobDoc:
    """Every node of the regroup at ``generation`` was told it. Unchanged
    unless it is the one being told."""
    if job.telling is None or job.telling.generation != generation:
        return job
    return job.model_copy(update={"telling": None})


def regrouped(job: JobDoc, planned: RegroupPlan, now: datetime) -> JobDoc:
    """The gang regrouped as ``planned``: training again, on the same
    attempt, at the size it names. Unchanged unless the job is still where
    the plan was made (the same replacement and generation, waiting, and
    every node it names still one of the gang's): a second record of it,
    one after the gang was relaunched, or one naming a node lost since (an
    elastic gang's further loss keeps its generation) is a no-op."""
    replacing = job.replacing
    if (
        replacing is None
        or replacing.replacement != planned.replacement
        or job.gang_generation != planned.base
        or job.substatus != S.REPLACING_NODE
        or any(name not in job.nodes for name in planned.nodes)
    ):
        return job
    if planned.shrink:
        booting = pending_nodes.replacements(job)
        verb = "boots" if len(booting) == 1 else "boot"
        note = (
            f"the gang trains on at {len(planned.nodes)} of {len(job.nodes)} nodes from its "
            f"last save while {', '.join(booting)} {verb}"
        )
        moved = move_job(job, S.TRAINING, now, note=note)
        shrunk = replacing.model_copy(
            update={"shrunk": list(planned.nodes), "saved": False, "lost_head": None}
        )
        return moved.model_copy(
            update={
                "replacing": shrunk,
                "gang_generation": planned.generation,
                "gang_stops": [],
                "gang_stepped": False,
                "resizes": job.resizes + 1,
            }
        )
    if replacing.shrunk:
        restart = f"grows back to {len(job.nodes)} nodes from its last save"
    elif replacing.setting_up is not None:
        restart = "sets up with it"
    else:
        restart = "restarts from its last save"
    joined = pending_nodes.replacements(job)
    note = f"{', '.join(joined)} joined; the gang {restart}"
    moved = move_job(job, replacing.setting_up or S.TRAINING, now, note=note)
    return moved.model_copy(
        update={
            "replacing": None,
            "gang_stops": [],
            "gang_stepped": False,
            "gang_generation": planned.generation,
            "resizes": job.resizes + bool(replacing.shrunk),
        }
    )


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
