"""A gang node's non-zero exit, held for the preemption notice before it is
judged: it may be another node's preemption, seen from this node. Pure.

Compute Engine gives its 30 s notice to the one VM it takes. A trainer
without the gang's stop flag (a command of the user's, a Ray job, or the
built-in trainer when a notice is missed) keeps training on the other nodes;
their ranks die in the next collective, the peer gone, and a node whose agent
had no notice reports a JobFinished with a non-zero exit, often before the
noticed node's SpotPreempted arrives (it comes once that node has saved, or
from its shutdown script, or the log sink, or the reaper's sight of the VM
gone). Judged at once, the gang FAILED, or spent a restart on errors, and the
preemption's report came stale.

So such a finish (non-zero, from a node of the current attempt of a gang still
on its VMs) is kept on the job (``held_finish``), and judged later:

* a preemption of any node of the same attempt meanwhile is the attempt's
  end (``lifecycle.vm_lost`` drops the hold): a preemption, not an error;
* otherwise, once ``HOLD_S`` has passed since it was heard, it is judged as
  it would have been at once (``lifecycle.finished``: the failure policy
  restarts the job or fails it), by the reaper's next sweep, or by the
  finish's own redelivery, whichever comes first: nothing waits for ever.

The first non-zero finish of an attempt is the one held and judged; a
second node's, a redelivery or an older attempt's changes nothing (an older
attempt's is stale, as any event of it is). An exit 0 of node 0 ends the
job as ever, hold or not.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from spotline.shared.contract.events import JobFinished
from spotline.shared.domain import lifecycle
from spotline.shared.domain.documents import HeldFinish, JobDoc
from spotline.shared.domain.liveness import NOTICE_MARGIN_S, PREEMPTION_NOTICE_S
from spotline.shared.domain.states import JobStatus, JobSubstatus

# The noticed node's report comes within its 30 s notice (the log sink's at
# its start, the agent's once saved, the shutdown script's at its end); the
# margin covers the report's delivery and clocks, as for a preempted VM.
HOLD_S = PREEMPTION_NOTICE_S + NOTICE_MARGIN_S


def holds(job: JobDoc, event: JobFinished) -> bool:
    """Whether ``event`` is a finish to hold: non-zero, from a node of the
    current attempt of a gang that is still on its VMs."""
    return (
        event.exit_code != 0
        # A trainer that never started did not die in a collective.
        and not event.unrecoverable
        and len(job.nodes) > 1
        and event.attempt == job.attempt
        and event.instance in job.nodes
        and job.status in JobStatus.active()
        and job.substatus in JobSubstatus.on_vm()
        # While a node is replaced, a node's exit relaunches the gang at once.
        and job.replacing is None
    )


def hold(job: JobDoc, event: JobFinished, now: datetime) -> JobDoc:
    """The job with ``event`` held (``holds`` is true); the progress it
    carries is recorded now. A finish already held for the attempt stays;
    past its window, it is judged here."""
    lifecycle.check_current(job, event)
    job = lifecycle.catch_up(job, event, now)
    if event.last_epoch is not None:
        job = lifecycle.record_progress(job, event.last_epoch, now)
    held = job.held_finish
    if held is not None and held.event.attempt == job.attempt:
        return judge(job, now)
    kept = HeldFinish(event=event.model_copy(update={"token": ""}), since=now)
    return job.model_copy(update={"held_finish": kept, "updated_at": now})


def due(job: JobDoc, now: datetime) -> bool:
    """Whether the job holds a finish whose window has passed (the reaper's question)."""
    held = job.held_finish
    return held is not None and now >= held.since + timedelta(seconds=HOLD_S)


def judge(job: JobDoc, now: datetime) -> JobDoc:
    """The held finish judged, once its window has passed with no preemption
    of the attempt: as ``lifecycle.finished`` judges a finish (a restart by
    the failure policy, or FAILED). A hold of an attempt that has ended is
    dropped; one still in its window is kept."""
    held = job.held_finish
    if held is None:
        return job
    if not holds(job, held.event):
        return job.model_copy(update={"held_finish": None})
    if not due(job, now):
        return job
    return lifecycle.finished(job.model_copy(update={"held_finish": None}), held.event, now)
