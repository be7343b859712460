"""The nodes a gang is replacing at once: the first lost one
(``NodeReplacement``'s own fields) and an elastic gang's later ones
(``NodeReplacement.more``), each with its replacement. Pure."""

from __future__ import annotations

from typing import Any

from spotline.shared.domain.documents import AttemptRecord, JobDoc, NodeReplacement, PendingNode
from spotline.shared.domain.placement import replacement_name

_OWN = (
    "rank",
    "lost",
    "replacement",
    "booted",
    "refused_at",
    "refusals",
    "lost_replacements",
    "first_lost",
)


def pending(replacing: NodeReplacement | None) -> list[PendingNode]:
    """Every node being replaced, the first one first."""
    if replacing is None:
        return []
    first = PendingNode(**{field: getattr(replacing, field) for field in _OWN})
    return [first, *replacing.more]


def of_replacement(job: JobDoc, name: str) -> PendingNode | None:
    """The node being replaced by the VM ``name``; None: no replacement."""
    return next((p for p in pending(job.replacing) if p.replacement == name), None)


def of_lost(job: JobDoc, name: str) -> PendingNode | None:
    """The node being replaced for the lost VM ``name``; None: none."""
    return next((p for p in pending(job.replacing) if p.lost == name), None)


def trained_lost(node: PendingNode) -> str | None:
    """The VM lost at the node's rank that trained with the gang (whose
    save, node 0's, the regroup waits for): ``lost``, or the first one lost
    once its replacements were lost too; None: not on record."""
    return node.first_lost if node.lost_replacements else node.lost


def of_trained_lost(job: JobDoc, name: str) -> PendingNode | None:
    """The node being replaced for the lost VM ``name``, which trained with
    the gang (not a replacement lost before it joined); None: none."""
    return next((p for p in pending(job.replacing) if trained_lost(p) == name), None)


def replacements(job: JobDoc) -> list[str]:
    """The VMs replacing the gang's lost nodes, not joined yet."""
    return [p.replacement for p in pending(job.replacing)]


def all_booted(replacing: NodeReplacement) -> bool:
    """Whether every replacement's agent is up."""
    return all(p.booted for p in pending(replacing))


def updated(replacing: NodeReplacement, name: str, /, **update: Any) -> NodeReplacement:
    """``replacing`` with ``update`` made to the node that the VM ``name``
    replaces (unchanged when none does)."""
    if replacing.replacement == name:
        return replacing.model_copy(update=update)
    more = [p.model_copy(update=update) if p.replacement == name else p for p in replacing.more]
    return replacing.model_copy(update={"more": more})


def renamed(job: JobDoc, rank: int, name: str) -> tuple[list[str], list[AttemptRecord]]:
    """The gang's node list with the VM ``name`` at ``rank`` (a replacement
    for the node lost there), and the attempts' records, the current one's
    node names following it."""
    nodes = [*job.nodes[:rank], name, *job.nodes[rank + 1 :]]
    records = [
        r.model_copy(update={"node_names": nodes}) if r.attempt == job.attempt else r
        for r in job.attempts
    ]
    return nodes, records


def another(
    job: JobDoc, instance: str, generation: int, replacing: NodeReplacement, **update: Any
) -> JobDoc:
    """The job with its node ``instance`` lost too while ``replacing`` (the
    job's replacement, as the caller changed it) is under way: another
    pending node for its rank, named at ``generation``
    (``placement.replacement_name``), one more preemption counted, the
    node list and node 0 following it; ``update``: more fields of the
    replacement."""
    rank = job.nodes.index(instance)
    name = replacement_name(job.job_id, job.attempt, rank, generation)
    nodes, records = renamed(job, rank, name)
    more = [*replacing.more, PendingNode(rank=rank, lost=instance, replacement=name)]
    return job.model_copy(
        update={
            "preemptions": job.preemptions + 1,
            "nodes": nodes,
            "instance": nodes[0],
            "replacing": replacing.model_copy(update={"more": more, **update}),
            "attempts": records,
        }
    )


def next_generation(job: JobDoc) -> tuple[int, NodeReplacement]:
    """The generation of a waiting gang's node list changed again before it
    regrouped (another node lost, or a replacement): newer than any its
    replacements were made at, so that each takes the regroup's node list
    rather than the one it was made with; and the job's replacement keeping
    the generation the gang stopped at, which its nodes' stop reports carry."""
    replacing = job.replacing
    assert replacing is not None
    stopped = replacing.stopped_generation
    kept = replacing.model_copy(
        update={"stopped_generation": job.gang_generation - 1 if stopped is None else stopped}
    )
    return job.gang_generation + 1, kept


def head_lost(replacing: NodeReplacement) -> bool:
    """Whether node 0 is one of the nodes being replaced (its save at the
    gang's stop came, if at all, from the lost VM)."""
    return any(node.rank == 0 for node in pending(replacing))
