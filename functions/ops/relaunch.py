"""Placing a job's next attempt while the lost attempt's VMs go: never
waiting for their deletes (shared by recovery, restarts and a gang's
replacement given up)."""

from __future__ import annotations

from datetime import datetime

from spotline.functions.deps import Deps
from spotline.functions.ops.jobs import start
from spotline.functions.ops.queue import queue_next_attempt
from spotline.functions.ops.restore_gate import open_restore_gate
from spotline.functions.ops.teardown import Release, begin_release, delete_released, end_release
from spotline.shared.domain.documents import JobDoc, QueueReason
from spotline.shared.domain.states import JobSubstatus


def replace_attempt(
    deps: Deps, job: JobDoc, releases: list[Release], reason: QueueReason, now: datetime
) -> JobDoc:
    """Let the lost attempt's VMs go and place the next attempt, never
    waiting for their deletes: 1. the old instances CLOSING; 2. the next
    attempt's VMs inserted (with new names; the slots and quotas count both
    for the overlap; they wait to restore: ``spotline.shared.domain.restore_gate``);
    3. the old VMs deleted, their instances CLOSED; 4. the new attempt told
    to restore. A crash after 1 leaves CLOSING instances the reaper deletes
    (and then opens the gate) and a job in REQUESTING_SERVER it places; a
    failed delete is raised after the placement, for a redelivery or the
    reaper to finish."""
    releasing = begin_release(deps, releases, now)
    if job.substatus == JobSubstatus.REQUESTING_SERVER:
        try:
            job = relaunch(deps, job, reason, now)
        except Exception:
            # The placement failed (the queue entry and the reaper retry it):
            # the lost VMs still go now, not a sweep later.
            delete_released(deps, releasing)
            end_release(deps, releasing, now)
            raise
    delete_released(deps, releasing)
    end_release(deps, releasing, now)
    if releasing.doomed:
        gone = [instance.name for _, instance in releasing.doomed]
        open_restore_gate(deps, job.job_id, now, gone=gone)
    return job


def relaunch(deps: Deps, job: JobDoc, reason: QueueReason, now: datetime) -> JobDoc:
    """Queue the attempt first (if this process dies, the reaper places it),
    then place it now, within the user's active-jobs quota (``start``)."""
    queue_next_attempt(deps, job, reason, now)
    return start(deps, job, now)
