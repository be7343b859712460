"""An elastic gang trains on at a smaller size while its lost node is
replaced, and grows back when the replacement joins. Pure.

With ``min_nodes`` set below ``nodes``, a gang that loses one node
(``node_replacement.lost``) does not wait for the replacement to boot: as
soon as node 0's save at the shared step is complete, and if at least
``min_nodes`` nodes survive, the survivors regroup among themselves (a new
generation, ranks renumbered 0..k-1 in their old order) and restart from
that save (``shrinks``). The job is TRAINING again, still replacing.

Once the replacement's agent is up (``grows``; every one of them, when more
than one node is being replaced), spotline asks the smaller
gang to stop: its nodes stop their ranks at a step they agree on, rank 0
saves, and they report the stop (``node_replacement.stopped``, with the
generation they trained at). The job waits (REPLACING_NODE) for the head's
report; then the gang regroups at its full size, the replacement with it,
from that save (``node_replacement.ready``). Each change of size is counted
(``JobDoc.resizes``): a restart from the last save, and another effective
batch size.

The orders of events:

* the replacement boots before node 0's save is complete: no shrink, the
  gang regroups at its full size at once, as without ``min_nodes``;
* fewer than ``min_nodes`` survivors: they wait, as without ``min_nodes``;
* a stop report of the gang as it was before it shrank (late, duplicated):
  not the smaller gang's save, ignored (its step is still recorded);
* the replacement lost before it joined (``replaces_again``, for a
  waiting gang too): another one is inserted for its rank under a new name,
  and the smaller gang trains on (or, asked to grow back already, stops and
  waits for the new one);
* another node's loss while the smaller gang trains (or is asked to grow
  back), at least ``min_nodes`` nodes left (``loses_again``): it is
  replaced too (``NodeReplacement.more``), the job waits (REPLACING_NODE,
  the bound counting from this loss) for the smaller gang's head's save at
  the stop its notice caused, and the rest shrink again from it. The gang
  grows back once every replacement is up, not as each is: one stop, save
  and restart for all, rather than one per replacement (the replacements
  boot at about the same time, and each restart costs the gang its steps
  since the last save);
* another node's loss before the gang shrank (it waits for node 0's save):
  replaced as for any waiting gang (``further_losses``); the survivors left
  shrink once that save is complete, if at least ``min_nodes`` of them;
* the loss of the smaller gang's head (its rank 0, which saves), at least
  ``min_nodes`` left: replaced the same way; its own report after its save
  (or its notice's end: ``NodeReplacement.lost_head``) is the save the rest
  shrink again from, the next node their head;
* a loss while the smaller gang trains that would leave fewer than
  ``min_nodes`` (two nodes noticed at once, the second heard after the
  shrink, or a further loss): replaced the same way, and the nodes left
  wait (REPLACING_NODE, the bound counting from this loss) as a gang
  without ``min_nodes`` does, for their head's save and every
  replacement, then the gang grows back whole (``node_replacement.ready``).
  Not shrinking again as some replacements boot: they boot at about the
  same time, and each change of size is a restart. Relaunched whole
  (``lifecycle.vm_lost``) only with no node of the smaller gang left, at
  ``max_preemptions``, or past the bound;
* while the smaller gang trains, ``replace_node_timeout_s`` does not run: the
  gang is not waiting. It counts again from the request to stop, and past it
  the whole gang is relaunched (``node_replacement.overdue``). A replacement
  lost after that request does not restart it: a replacement lost each time
  before it joins does not hold the waiting gang for ever.
"""

from __future__ import annotations

from datetime import datetime

from spotline.shared.domain import failure_policy, lifecycle, pending_nodes
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.placement import replacement_name
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.transitions import move_job, note_job

S = JobSubstatus


def survivors(job: JobDoc) -> list[str]:
    """The gang's nodes but the replacements, by rank: the smaller gang."""
    joining = pending_nodes.replacements(job)
    return [name for name in job.nodes if name not in joining]


def shrinks(job: JobDoc, save_complete: bool) -> bool:
    """Whether the waiting survivors are to train on without the
    replacement: an elastic job, with enough of them, node 0's save complete
    (``save_complete``), and the replacement not up (then the whole gang
    regroups at once); not a gang that lost the node as it set up, whose
    replacement boots while the others still set up."""
    replacing = job.replacing
    min_nodes = job.spec.min_nodes
    return (
        replacing is not None
        and min_nodes is not None
        and job.substatus == S.REPLACING_NODE
        # Waiting: at its full size, or at a smaller one that lost another node.
        and (not replacing.shrunk or not replacing.grow_asked)
        and not pending_nodes.all_booted(replacing)
        and replacing.setting_up is None
        and save_complete
        and len(survivors(job)) >= min_nodes
    )


def grows(job: JobDoc) -> bool:
    """Whether the smaller gang is to be asked to stop and grow back: every
    replacement is up (one stop and restart for all, rather than one each),
    and it was not asked yet."""
    replacing = job.replacing
    return (
        replacing is not None
        and job.substatus == S.TRAINING
        and bool(replacing.shrunk)
        and pending_nodes.all_booted(replacing)
        and not replacing.grow_asked
    )


def grow_asked(job: JobDoc, now: datetime) -> JobDoc:
    """The smaller gang was asked to stop at its next step: the job waits for
    its save (REPLACING_NODE), ``replace_node_timeout_s`` counting from now.
    Unchanged unless ``grows``."""
    replacing = job.replacing
    if replacing is None or not grows(job):
        return job
    note = (
        f"{replacing.replacement} is up; the gang stops at its next step to grow back "
        f"to {len(job.nodes)} nodes"
    )
    moved = move_job(job, S.REPLACING_NODE, now, note=note)
    asked = replacing.model_copy(update={"grow_asked": True, "since": now})
    return moved.model_copy(update={"replacing": asked, "gang_stops": []})


def head(job: JobDoc) -> str | None:
    """The node whose rank 0 saves and whose finish ends the job: node 0, or
    the smaller gang's first node while it trains without the replacement."""
    replacing = job.replacing
    if replacing is not None and replacing.shrunk:
        return replacing.shrunk[0]
    return job.nodes[0] if job.nodes else job.instance


def replaces_again(job: JobDoc, instance: str, attempt: int, cause: S) -> bool:
    """Whether the loss of ``instance`` is that of a replacement before it
    joined, the gang waiting for it, or an elastic gang training without it
    (or asked to grow back): another replacement is inserted, the gang kept."""
    replacing = job.replacing
    return (
        replacing is not None
        and instance in pending_nodes.replacements(job)
        and keeps_attempt(job, attempt, cause)
    )


def replacement_lost(
    job: JobDoc,
    instance: str,
    now: datetime,
    note: str,
    step: int | None = None,
    checkpoint_uri: str | None = None,
) -> JobDoc:
    """The job after its replacement's loss (``replaces_again``): another
    one named for the rank (new: ``placement.replacement_name``), not up
    yet; the substatus, the smaller gang and the bound's start kept (the
    attempt's record names each replacement once placed), the loss a line
    in the history (``note``, the new one named). A waiting gang's
    node list moves to its next generation (``pending_nodes.next_generation``:
    the other replacements take it); a smaller gang's grows back at one."""
    replacing = job.replacing
    node = pending_nodes.of_replacement(job, instance)
    assert replacing is not None and node is not None
    if step is not None:
        job = lifecycle.saved_state(job, job.attempt, step, checkpoint_uri)
    generation = job.gang_generation
    if not replacing.shrunk:
        generation, replacing = pending_nodes.next_generation(job)
    again = node.lost_replacements + 1
    rank = node.rank
    new = replacement_name(job.job_id, job.attempt, rank, job.gang_generation + 1, again)
    nodes, records = pending_nodes.renamed(job, rank, new)
    renewed = pending_nodes.updated(
        replacing,
        instance,
        lost=instance,
        replacement=new,
        booted=False,
        refused_at=None,
        refusals=0,
        lost_replacements=again,
        first_lost=pending_nodes.trained_lost(node),
    )
    renamed = job.model_copy(
        update={
            "preemptions": job.preemptions + 1,
            "nodes": nodes,
            "instance": nodes[0],
            "replacing": renewed,
            "gang_generation": generation,
            "attempts": records,
        }
    )
    return note_job(renamed, now, f"{note}; replacing it with {new}")


def loses_again(job: JobDoc, instance: str, attempt: int, cause: S) -> bool:
    """Whether the loss of ``instance`` is another node's of an elastic gang
    training at its smaller size (or asked to grow back, or waiting below
    ``min_nodes``), with a node of it left: it is replaced too, and the
    others train on once their head's save is complete, if at least
    ``min_nodes`` of them (else they wait for every replacement, as a gang
    without ``min_nodes`` does); the smaller gang's head (rank 0, which
    saves) too: the next node heads the gang left."""
    replacing = job.replacing
    return (
        replacing is not None
        and job.spec.min_nodes is not None
        and instance in replacing.shrunk
        and len(replacing.shrunk) > 1
        and keeps_attempt(job, attempt, cause)
    )


def keeps_attempt(job: JobDoc, attempt: int, cause: S) -> bool:
    """Whether a further loss in ``attempt`` may keep the gang's attempt: a
    preemption of the current attempt while it waits for its replacements
    (or an elastic gang trains shrunk), no finish held for judging, and no
    preemption limit reached."""
    return (
        cause == S.PREEMPTED
        and attempt == job.attempt
        and job.substatus in (S.TRAINING, S.REPLACING_NODE)
        and job.held_finish is None
        and failure_policy.preemption_limit(job, "") is None
    )


def lost_again(
    job: JobDoc,
    instance: str,
    now: datetime,
    note: str,
    step: int | None = None,
    checkpoint_uri: str | None = None,
    *,
    saved: bool = False,
    generation: int | None = None,
) -> JobDoc:
    """The job after another node's loss (``loses_again``): a replacement
    named for its rank, the job waiting (REPLACING_NODE) for the smaller
    gang's save at its stop, ``replace_node_timeout_s`` counting from now.
    The smaller gang's head lost: that save is its own (``saved``: its
    agent's report after saving), or complete at its notice's end
    (``NodeReplacement.lost_head``). ``generation``: the one the lost node's
    agent last ran in; older than the smaller gang's, the node never joined
    it (noticed with the first loss), so the smaller gang never stepped and
    the save it shrank from stands."""
    replacing = job.replacing
    assert replacing is not None
    if generation is not None and generation < job.gang_generation:
        replacing = replacing.model_copy(update={"saved": True})
    lost_head = replacing.lost_head
    # The head that saves at this stop: the first one lost (a node after it
    # heads nothing that saved).
    if instance == head(job) and lost_head is None:
        lost_head = instance
        replacing = replacing.model_copy(update={"saved": replacing.saved or saved})
    if step is not None:
        job = lifecycle.saved_state(
            job, attempt=job.attempt, step=step, checkpoint_uri=checkpoint_uri
        )
    added = pending_nodes.another(
        job,
        instance,
        job.gang_generation + 1,
        replacing,
        shrunk=[name for name in replacing.shrunk if name != instance],
        grow_asked=False,
        since=now,
        lost_head=lost_head,
    )
    new = added.nodes[job.nodes.index(instance)]
    note = f"{note}; replacing it with {new}"
    if added.substatus == S.REPLACING_NODE:  # asked to grow back: waiting already
        return note_job(added, now, note)
    return move_job(added, S.REPLACING_NODE, now, note=note)
