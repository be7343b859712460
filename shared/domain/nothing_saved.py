"""A job that never saved says so, with what to do (``JobDoc.nothing_saved``).

Frameworks save to a local folder; pointed elsewhere (a relative path, the
working folder), they save onto a disk that dies with the VM, and the job
starts over after every preemption or completes with its model gone. The
agent tells how many units its mirror of the trainer's folders holds in
storage (``mirrored_checkpoints``, ``mirrored_outputs`` on SpotPreempted and
JobFinished); with those at 0 and no checkpoint ever reported, the job says
so in one line. An agent that does not count (None) is not judged.
"""

from __future__ import annotations

from spotline.shared.contract.events import JobFinished, PreemptionNotice
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus

CHECKPOINT_HINT = (
    "point your framework's checkpoint folder at $SPOTLINE_CHECKPOINT_DIR (the Trainer's "
    "output_dir, Lightning's dirpath, Keras' ModelCheckpoint, torch.save): spotline "
    "restores it on the next attempt"
)
OUTPUT_HINT = "write the trained model to $SPOTLINE_OUTPUT_DIR, which spotline uploads"


def reported_a_checkpoint(job: JobDoc) -> bool:
    """Whether any attempt reported a checkpoint (an epoch's, or one saved on a notice)."""
    return job.checkpoint_uri is not None or any(
        a.checkpoint_step is not None for a in job.attempts
    )


def after_preemption(job: JobDoc, notice: PreemptionNotice) -> JobDoc:
    """``job`` with the line set when the agent's report of its preemption
    says nothing was saved, and cleared when something was."""
    if notice.source != "agent" or notice.mirrored_checkpoints is None:
        return job
    saved = (
        reported_a_checkpoint(job)
        or notice.checkpoint_uri is not None
        or notice.step is not None
        or notice.mirrored_checkpoints > 0
    )
    line = None if saved else f"preempted with nothing saved, so it starts over; {CHECKPOINT_HINT}"
    return _with(job, line)


def after_finish(job: JobDoc, event: JobFinished) -> JobDoc:
    """``job`` with the line set when it completed on ``event`` without ever
    saving a checkpoint or an output, and cleared when it saved something."""
    if event.mirrored_checkpoints is None or event.mirrored_outputs is None:
        return job
    if job.status != JobStatus.COMPLETED or event.exit_code != 0:
        return job
    saved = (
        reported_a_checkpoint(job)
        or event.checkpoint_uri is not None
        or event.mirrored_checkpoints > 0
        or event.mirrored_outputs > 0
    )
    line = (
        None
        if saved
        else "completed without saving a checkpoint or an output: the trained model was "
        f"lost with the VM; {OUTPUT_HINT}, and {CHECKPOINT_HINT}"
    )
    return _with(job, line)


def _with(job: JobDoc, line: str | None) -> JobDoc:
    return job if job.nothing_saved == line else job.model_copy(update={"nothing_saved": line})
