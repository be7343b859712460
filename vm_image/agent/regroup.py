"""Waiting, after this node's ranks stopped with its gang (another node's
notice), for the gang to regroup around the lost node's replacement
(``spotline.shared.domain.node_replacement``): spotline writes the new node
list into the ``spotline-regroup`` metadata item once the replacement is up
and node 0's save is complete. If it relaunches the whole gang instead, it
deletes this VM: the agent's SIGTERM ends the wait.

An elastic gang (``spotline.shared.domain.gang_resize``) regroups at a
smaller size without the replacement; once that is up, spotline asks the
smaller gang to stop (``spotline-gang-stop``: its generation), which the
agent turns into the stop a peer's notice causes (``watch_gang_stop``).

A gang that loses a node while it sets up regroups with nothing to save:
a node reads the regroup before its trainer starts (``newer_regroup``), or,
its ranks already waiting in a rendezvous with the lost node, while they run
(``watch_regroup``): they are stopped and started again with the new list."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError

from spotline.shared import logs
from spotline.shared.contract.assignment import Assignment, Regroup
from spotline.shared.domain.vms import GANG_STOP_METADATA_KEY, REGROUP_METADATA_KEY
from spotline.vm_image.agent.metadata import Metadata, MetadataError

REGROUP_ATTRIBUTE = f"instance/attributes/{REGROUP_METADATA_KEY}"
GANG_STOP_ATTRIBUTE = f"instance/attributes/{GANG_STOP_METADATA_KEY}"
# Beyond the job's bound: the reports, the reaper's sweep (once a minute) and
# the metadata writes that come between the loss and the regroup.
REGROUP_MARGIN_S = 90.0
# Each hanging read's bound: a notice (the VM deleted) is seen within it.
_WAIT_STEP_S = 5.0
# How often an absent item is read again (a hanging read needs it to exist).
_ABSENT_POLL_S = 2.0

T = TypeVar("T")


def await_regroup(
    metadata: Metadata, assignment: Assignment, stop: threading.Event, wait_s: float
) -> Regroup | None:
    """The gang's regroup newer than ``assignment``'s generation, once
    written; None when ``wait_s`` passes first (0: no wait), or ``stop`` is
    set (this VM is being deleted: the gang is relaunched whole)."""
    if wait_s <= 0:
        return None
    deadline = time.monotonic() + wait_s
    logs.info(f"stopped with the gang: waiting up to {wait_s:.0f} s for it to regroup")
    regroup = _watch(
        metadata,
        REGROUP_ATTRIBUTE,
        lambda value: _newer(value, assignment),
        stop,
        deadline,
        absent_s=1.0,
    )
    if regroup is None and not stop.is_set():
        logs.warning(f"the gang did not regroup within {wait_s:.0f} s; this node stops")
    return regroup


def regroup_wait_s(assignment: Assignment) -> float:
    """How long a node of the gang waits for its regroup, once its ranks
    stopped with the gang (a replacement: once set up): as long as the job
    may take to regroup, and a margin for the reports and metadata writes
    around it (none: it does not wait). The job's bound for a replacement
    counts again from each further loss while the gang waits
    (``spotline.shared.domain.further_losses``), and the gang keeps its
    attempt through at most one loss a node but one: a bound for each."""
    bound = assignment.spec.replace_node_timeout_s
    losses = max(assignment.spec.nodes - 1, 1)
    return bound * losses + REGROUP_MARGIN_S if bound > 0 else 0.0


def _watch(
    metadata: Metadata,
    attribute: str,
    found: Callable[[str], T | None],
    stop: threading.Event,
    deadline: float,
    absent_s: float,
) -> T | None:
    """The first value of ``attribute`` that ``found`` makes something of,
    read as it changes (hanging reads of at most ``_WAIT_STEP_S``); None once
    ``stop`` is set or the monotonic ``deadline`` passes. An absent item (or
    a failed read) is read again ``absent_s`` later."""
    etag: str | None = None
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            if etag is None:
                value, etag = metadata.get_with_etag(attribute)
            else:
                step = max(min(remaining, _WAIT_STEP_S), 1.0)
                value, etag = metadata.wait_for_change(attribute, etag, timeout_s=step)
        except MetadataError:  # not written yet (the item is absent), or a failed read
            etag = None
            stop.wait(min(absent_s, max(remaining, 0.0)))
            continue
        if stop.is_set():  # a read that returned as it was set: too late to act on
            return None
        result = found(value)
        if result is not None:
            return result
    return None


def _newer(value: str, assignment: Assignment) -> Regroup | None:
    """``value`` as a regroup newer than ``assignment``'s generation."""
    regroup = _parsed(value)
    if regroup is None or regroup.generation <= assignment.generation:
        return None
    return regroup


def _parsed(value: str) -> Regroup | None:
    try:
        return Regroup.model_validate_json(value)
    except ValidationError as err:
        logs.warning(f"{REGROUP_ATTRIBUTE} is not a regroup: {err}")
        return None


def newer_regroup(metadata: Metadata, assignment: Assignment) -> Regroup | None:
    """The regroup written for this node newer than ``assignment``'s
    generation, if any: a replacement made before its elastic gang shrank
    and grew back joins at the generation the gang grew back at."""
    try:
        return _newer(metadata.get(REGROUP_ATTRIBUTE), assignment)
    except MetadataError:
        return None


def watch_regroup(
    metadata: Metadata,
    assignment: Assignment,
    name: str,
    done: threading.Event,
    on_regroup: Callable[[Regroup], None],
) -> None:
    """Until ``done`` is set, call ``on_regroup`` once (and return) with a
    regroup newer than ``assignment``'s generation that names this node
    (``name``): the gang regrouped while this node's ranks ran, as when a
    node was lost while the gang set up and these ranks wait in a
    rendezvous with it that will never complete."""
    regroup = _watch(
        metadata,
        REGROUP_ATTRIBUTE,
        lambda value: _naming(_newer(value, assignment), name),
        done,
        math.inf,
        absent_s=_ABSENT_POLL_S,
    )
    if regroup is not None:
        on_regroup(regroup)


def _naming(regroup: Regroup | None, name: str) -> Regroup | None:
    return regroup if regroup is not None and name in regroup.nodes else None


def watch_gang_stop(
    metadata: Metadata, generation: int, done: threading.Event, on_stop: Callable[[], None]
) -> None:
    """Until ``done`` is set, call ``on_stop`` once (and return) when spotline
    asks the gang of ``generation`` to stop: an elastic gang at a smaller
    size whose replacement is up, to grow back."""
    asked = _watch(
        metadata,
        GANG_STOP_ATTRIBUTE,
        lambda value: True if value.strip() == str(generation) else None,
        done,
        math.inf,
        absent_s=_ABSENT_POLL_S,
    )
    if asked:
        on_stop()
