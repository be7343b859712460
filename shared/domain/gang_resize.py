"""An elastic gang trains on at a smaller size while its lost node is
replaced, and grows back when the replacement joins. Pure.

With ``min_nodes`` set below ``nodes``, a gang that loses one node
(``node_replacement.lost``) does not wait for the replacement to boot: as
soon as node 0's save at the shared step is complete, and if at least
``min_nodes`` nodes survive, the survivors regroup among themselves (a new
generation, ranks renumbered 0..k-1 in their old order) and restart from
that save (``shrinks``). The job is TRAINING again, still replacing.

Once the replacement's agent is up (``grows``), spotline asks the smaller
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
* a loss while the smaller gang trains (a survivor, or the replacement
  before it joined): the whole gang is relaunched (``lifecycle.vm_lost``),
  as for a second loss while replacing;
* while the smaller gang trains, ``replace_node_timeout_s`` does not run: the
  gang is not waiting. It counts again from the request to stop, and past it
  the whole gang is relaunched (``node_replacement.overdue``).
"""

from __future__ import annotations

from datetime import datetime

from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.transitions import move_job

S = JobSubstatus


def survivors(job: JobDoc) -> list[str]:
    """The gang's nodes but the replacement, by rank: the smaller gang."""
    replacing = job.replacing
    if replacing is None:
        return list(job.nodes)
    return [name for name in job.nodes if name != replacing.replacement]


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
        and not replacing.shrunk
        and not replacing.booted
        and replacing.setting_up is None
        and save_complete
        and len(survivors(job)) >= min_nodes
    )


def grows(job: JobDoc) -> bool:
    """Whether the smaller gang is to be asked to stop and grow back: the
    replacement is up, and it was not asked yet."""
    replacing = job.replacing
    return (
        replacing is not None
        and job.substatus == S.TRAINING
        and bool(replacing.shrunk)
        and replacing.booted
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
