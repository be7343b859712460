"""A JobFinished that comes after its attempt was closed as lost: the
finish-vs-preempt race, decided here, pure.

The trainer exits 0, the agent publishes JobFinished, and at that moment the
Spot VM is preempted. The preemption's reports (the log sink's entry at the
start of the notice, the shutdown script's SpotPreempted) and the JobFinished
travel on different subscriptions, so either may come first; the reaper may
also find the VM gone before the finish arrives. Recorded first, the loss
closes attempt N and starts attempt N+1, and the finish of N is then an event
of an older attempt. Ignored, a job that completed runs again: one more VM,
a preemption counted, and a user's command run twice.

The design: the finish of attempt N, exit 0, arriving while the job is on
attempt N+1 that has not begun training (waiting for a VM, for capacity or
quota, or booting on one: no epoch and no step of N+1 reported), completes the
job on attempt N. N's record says "completed" and the preemption is no longer
counted; the job points at N's VM again; attempt N+1's record, if it got a VM,
ends "superseded", keeping what its VM cost; the handler then lets go of N+1's
VMs and queue entry (``spotline.functions.ops.recovery.release_superseded``; the reaper
does it too, since nothing live owns them). Once N+1 trains it carries on: it
resumed from N's last checkpoint and ends at once (a command job runs again),
and the late finish is only written in the history.

Rejected: holding a log-sink report until the agent speaks or the notice ends
(``liveness.PREEMPTION_NOTICE_S``). It would delay every preemption the agent
cannot report by up to 45 s plus a sweep, and would not cover the other order
of reports: the shutdown script's SpotPreempted (sent whenever the VM is
preempted, also after a clean finish) recovers at once and can still overtake
the JobFinished.

The same holds when the loss reached a limit (``max_preemptions``,
``max_attempts``) and FAILED the job on attempt N with no N+1: the finish of
N, exit 0, completes it (FAILED -> COMPLETED, the one move out of an ending,
``states.JOB_REVISIONS``); the loss is no longer counted and the error goes.
A job whose trainer trained to the end is not failed for the cloud's timing.

Only the attempt just before the current one, and only exit 0: a non-zero exit
reported after the loss is stale, since the trainer may have died of the
preemption's SIGTERM and the next attempt resumes and decides. (The agent
itself publishes JobFinished only when no notice came before the trainer ended;
after a notice it reports SpotPreempted instead: ``spotline.vm_image.agent``.)
"""

from __future__ import annotations

from datetime import datetime

from spotline.shared.contract.events import JobFinished
from spotline.shared.domain import gang_finish, lifecycle
from spotline.shared.domain.documents import AttemptRecord, HistoryEntry, JobDoc
from spotline.shared.domain.placement import node_names
from spotline.shared.domain.states import SETTING_UP, JobStatus, JobSubstatus
from spotline.shared.domain.transitions import move_job, revise_ending

S = JobSubstatus
# The next attempt has not begun training in these: no trainer ran on its VM yet.
NOT_TRAINING = frozenset(
    {S.REQUESTING_SERVER, S.WAITING_FOR_CAPACITY, S.WAITING_FOR_QUOTA, *SETTING_UP}
)
LOST = frozenset({"preempted", "stalled"})  # the outcomes of an attempt whose VM was lost
SUPERSEDED = "superseded"  # an attempt ended because the one before it had completed


def job_finished(job: JobDoc, event: JobFinished, now: datetime) -> JobDoc:
    """The job after a JobFinished of its current attempt (``lifecycle.finished``)
    or, exit 0, of the attempt before it, whose loss was recorded first.

    Raises:
        StaleEvent: an event of an older attempt that changes nothing (see the
            module's docstring), or from a VM the job no longer owns.
    """
    if gang_finish.holds(job, event):
        return gang_finish.hold(job, event, now)  # perhaps another node's preemption
    if event.attempt == job.attempt - 1 and event.exit_code == 0:
        lost = _lost_record(job, event)
        if lost is not None and job.status in JobStatus.active():
            if job.substatus in NOT_TRAINING:
                return _completed_late(job, lost, event, now)
            return _noted(job, event, now)
    if event.attempt == job.attempt and event.exit_code == 0 and _failed_by_loss(job):
        lost = _lost_record(job, event)
        if lost is not None:
            return _completed_after_limit(job, lost, event, now)
    return lifecycle.finished(job, event, now)


def _failed_by_loss(job: JobDoc) -> bool:
    """The job FAILED as its current attempt's loss was recorded: a limit
    (max_preemptions, max_attempts) ended it there, with no next attempt."""
    if job.substatus != S.FAILED:
        return False
    # Its first ending line (late events may add notes after it) and the move before.
    ends = [i for i, h in enumerate(job.history) if h.status in JobStatus.terminal()]
    if not ends or ends[0] == 0:
        return False
    before = job.history[ends[0] - 1]
    return before.attempt == job.attempt and before.substatus in (S.PREEMPTED, S.STALLED)


def _completed_after_limit(
    job: JobDoc, lost: AttemptRecord, event: JobFinished, now: datetime
) -> JobDoc:
    """COMPLETED on the attempt whose loss FAILED the job at a limit: its
    trainer had trained to the end, and the loss's report overtook the
    finish. The loss is no longer counted, as for a late finish above."""
    records = [
        r.model_copy(update={"outcome": "completed"}) if r.attempt == lost.attempt else r
        for r in job.attempts
    ]
    revised = job.model_copy(
        update={
            "preemptions": job.preemptions - (lost.outcome == "preempted"),
            "attempts": records,
        }
    )
    if event.last_epoch is not None:
        revised = lifecycle.record_progress(revised, event.last_epoch, now)
    note = f"{event.instance} exited 0 before its loss was recorded; the limit no longer applies"
    return lifecycle.accrue(revise_ending(revised, S.COMPLETED, now, note), now)


def ended_after_loss(job: JobDoc) -> bool:
    """The job completed on an attempt whose VM was recorded lost first: that
    VM is gone (or going, through its notice), so there is nothing to keep
    cooling or to stop; a later attempt's VMs and queue entry may be left."""
    return job.status == JobStatus.COMPLETED and any(
        h.attempt == job.attempt and h.substatus in (S.PREEMPTED, S.STALLED) for h in job.history
    )


def late_note(event: JobFinished) -> str:
    return (
        f"attempt {event.attempt} finished (exit 0) on {event.instance} after its loss "
        "was recorded; this attempt carries on"
    )


def _lost_record(job: JobDoc, event: JobFinished) -> AttemptRecord | None:
    """The event's attempt, closed as lost, on the VM that sent the event (a
    gang's node 0: a worker's finish does not end a job)."""
    for record in job.attempts:
        if (
            record.attempt == event.attempt
            and record.instance == event.instance
            and record.outcome in LOST
        ):
            return record
    return None


def _completed_late(job: JobDoc, lost: AttemptRecord, event: JobFinished, now: datetime) -> JobDoc:
    """COMPLETED on attempt N, its loss undone; attempt N+1 superseded."""
    records = []
    for record in job.attempts:
        if record.attempt == lost.attempt:
            record = record.model_copy(update={"outcome": "completed"})
        elif record.attempt > lost.attempt and record.ended_at is None:
            record = record.model_copy(update={"outcome": SUPERSEDED, "ended_at": now})
        records.append(record)
    rewound = job.model_copy(
        update={
            "attempt": lost.attempt,
            "instance": lost.instance,
            "nodes": node_names(job.job_id, lost.attempt, lost.nodes) if lost.nodes > 1 else [],
            "zone": lost.zone,
            "machine_id": lost.machine_id,
            "preemptions": job.preemptions - (lost.outcome == "preempted"),
            "attempts": records,
        }
    )
    if event.last_epoch is not None:
        rewound = lifecycle.record_progress(rewound, event.last_epoch, now)
    note = f"{event.instance} exited 0 before its loss was recorded; attempt {job.attempt} "
    note += "superseded"
    return lifecycle.accrue(move_job(rewound, S.COMPLETED, now, note=note), now)


def _noted(job: JobDoc, event: JobFinished, now: datetime) -> JobDoc:
    """The late finish in the history, once: a note on the current state, not a move."""
    note = late_note(event)
    if any(h.note == note for h in job.history):
        return job
    entry = HistoryEntry(
        at=now, status=job.status, substatus=job.substatus, attempt=job.attempt, note=note
    )
    return job.model_copy(update={"history": [*job.history, entry], "updated_at": now})
