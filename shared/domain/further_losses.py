"""A gang waiting for its replacement loses another node: that one is
replaced too, the attempt kept. Pure.

A gang that lost a node (``node_replacement.lost``) waits, REPLACING_NODE,
its survivors' ranks stopped at the shared step and node 0's save made or
under way. Another of its nodes lost meanwhile, node 0 included, is no
reason to start over on N new VMs: its ranks were stopped already, and
whatever it was to save was saved at that stop. So it is replaced as the
first one was (``replaces_another``): another ``PendingNode`` in
``NodeReplacement.more``, named for its rank, one insert, one more
preemption counted. The gang regroups once every replacement is up and
node 0's save at the stop is complete (``node_replacement.ready``).

* Node 0's save. The survivors' ranks stopped at the first loss; node 0's
  stop report (``node_replacement.stopped``) is that save. Node 0 lost
  later: its save counts if it was reported already (``saved`` stays), or
  once its own preemption report says it saved (the agent's, ``saved``;
  ``lost_node_saved`` after the log sink's), or its stop report is heard
  late; else once its notice is over, counted from the latest loss
  (``node_replacement.save_complete``).
* The gang's generation moves on at each further change of its node list
  (``pending_nodes.next_generation``): a replacement made at an earlier
  generation takes the regroup's node list, newer than its own, rather than
  the one it was made with (naming a VM lost since). The generation the
  gang stopped at is kept (``NodeReplacement.stopped_generation``): the
  survivors' stop reports carry it, and still count.
* ``replace_node_timeout_s`` counts from the latest loss: the newest
  replacement gets the whole bound to be placed and to boot, as the first
  did, and the wait for a lost node 0's notice counts from its loss. Losses
  that keep coming are each a preemption, bounded by ``max_preemptions``;
  a replacement lost before it joins does not move the bound
  (``gang_resize.replacement_lost``), so replacements that keep dying
  cannot hold the gang for ever.
* Still relaunched whole (``lifecycle.vm_lost``): a loss that would leave no
  node of the gang that is not being replaced (no survivor: nothing of the
  gang as it trained is left), a preemption past ``max_preemptions``, a
  finish held for judging, a loss of an earlier attempt or of another cause.
* A late, duplicate or reordered report of a node replaced already: stale
  (it is no node of the job's any more), as for the first loss.

An elastic gang (``gang_resize``) that has not shrunk yet is waiting too: a
further loss is replaced the same way, and the survivors left shrink once
node 0's save is complete, if at least ``min_nodes`` of them are left.
"""

from __future__ import annotations

from datetime import datetime

from spotline.shared.domain import gang_resize, lifecycle, pending_nodes
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.transitions import note_job

S = JobSubstatus


def replaces_another(job: JobDoc, instance: str, attempt: int, cause: S) -> bool:
    """Whether the loss of ``instance`` is another node's of a gang waiting
    for its replacement (not an elastic gang trained on since), with a
    survivor left: it is replaced too, the attempt kept."""
    replacing = job.replacing
    survivors = gang_resize.survivors(job)
    return (
        replacing is not None
        and not replacing.shrunk
        and job.substatus == S.REPLACING_NODE
        and instance in survivors
        and len(survivors) > 1
        and gang_resize.keeps_attempt(job, attempt, cause)
    )


def another_lost(
    job: JobDoc,
    instance: str,
    now: datetime,
    note: str,
    step: int | None = None,
    checkpoint_uri: str | None = None,
    *,
    saved: bool = False,
) -> JobDoc:
    """The job after another node's loss (``replaces_another``): a
    replacement named for its rank at the gang's next generation, the bound
    counting from now, and a line in the history (``note``, the replacement
    named) with its event, as for the first loss.

    Args:
        saved: the report comes from the lost VM's agent after its save: a
            lost node 0's save is complete.
    """
    if step is not None:
        job = lifecycle.saved_state(job, job.attempt, step, checkpoint_uri)
    generation, replacing = pending_nodes.next_generation(job)
    # Node 0's save was reported already, or its own report says it saved.
    head_saved = replacing.saved or (instance == job.nodes[0] and saved)
    added = pending_nodes.another(job, instance, generation, replacing, since=now, saved=head_saved)
    added = added.model_copy(
        update={
            "gang_generation": generation,
            "gang_stops": [n for n in added.gang_stops if n in added.nodes],
        }
    )
    new = added.nodes[job.nodes.index(instance)]
    # Waiting already: no move, but a user following the job sees each loss.
    return note_job(added, now, f"{note}; replacing it with {new}")
