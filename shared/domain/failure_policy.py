"""The failure policy: what a non-zero exit or a preemption does to
a job, and which limit ended it. Pure.

Errors and preemptions are counted apart, after SkyPilot's managed jobs: a
preemption is the cloud's doing and recovered from without limit by default
(``max_preemptions``: null); an error is the trainer's, restarted only as many
times as ``max_restarts_on_errors`` allows, so a bug does not burn VMs. Exit
codes in ``restart_on_exit_codes`` (a flaky NCCL error) always restart and do
not spend the error restarts, as SkyPilot's ``recover_on_exit_codes``;
``max_attempts`` still caps the VMs tried in all, so even they end.

A restart is the same path as a preemption's next attempt
(``transitions.next_attempt``): a new VM, which resumes from the last
checkpoint. Every count is made in the same write as the move to the next
attempt, and an event of an older attempt is stale (``lifecycle.check_current``),
so a redelivered, late or raced JobFinished restarts at most once and is
counted once.
"""

from __future__ import annotations

from enum import StrEnum

from spotline.shared.contract.exit_codes import exit_status
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus


class Restart(StrEnum):
    ON_ERROR = "on_error"  # spends one of max_restarts_on_errors
    ON_EXIT_CODE = "on_exit_code"  # a code in restart_on_exit_codes: spends none


def restart_for(job: JobDoc, exit_code: int) -> Restart | None:
    """Whether the policy restarts a job whose trainer exited ``exit_code``
    (non-zero), and on what account; None: the job fails."""
    spec = job.spec
    if exit_status(exit_code) in spec.restart_on_exit_codes:  # -6 from an older agent: 134
        return Restart.ON_EXIT_CODE
    if job.restarts_on_errors < spec.max_restarts_on_errors:
        return Restart.ON_ERROR
    return None


def counted(job: JobDoc, restart: Restart) -> JobDoc:
    """The job with the restart counted, on its own counter."""
    if restart == Restart.ON_EXIT_CODE:
        return job.model_copy(update={"restarts_on_exit_codes": job.restarts_on_exit_codes + 1})
    return job.model_copy(update={"restarts_on_errors": job.restarts_on_errors + 1})


def restart_note(job: JobDoc, restart: Restart, exit_code: int, instance: str) -> str:
    """The history's line for a restart: the exit, and the account it is on."""
    if restart == Restart.ON_EXIT_CODE:
        why = f"{exit_code} is in restart_on_exit_codes"
    else:
        limit = job.spec.max_restarts_on_errors
        why = f"restart {job.restarts_on_errors + 1} of max_restarts_on_errors={limit}"
    return f"{instance} exited with code {exit_code}; {why}"


def error_reason(job: JobDoc, exit_code: int, instance: str) -> str:
    """Why a non-zero exit ends the job, naming the limit when one was set."""
    reason = f"the trainer exited with code {exit_code} on {instance}"
    limit = job.spec.max_restarts_on_errors
    if limit:
        reason += (
            f" after {job.restarts_on_errors} restarts on errors (max_restarts_on_errors={limit})"
        )
    return reason


def preemption_limit(job: JobDoc, note: str) -> str | None:
    """Why the preemption being recorded ends the job (it is one more than
    ``max_preemptions``), or None: it is recovered from."""
    limit = job.spec.max_preemptions
    count = job.preemptions + 1
    if limit is None or count <= limit:
        return None
    return f"preempted {count} times (max_preemptions={limit}); the last: {note}"


def restarted_after(job: JobDoc, attempt: int) -> bool:
    """Whether the job's current attempt is a restart of ``attempt`` after an
    error (its history says so): that attempt's VMs are to go, and the new
    one is to be placed."""
    return job.attempt == attempt + 1 and any(
        h.attempt == attempt and h.substatus == JobSubstatus.ERRORED for h in job.history
    )


# The moves that end an attempt: a loss or restart (the next attempt follows)
# or the job's own end.
_ATTEMPT_ENDS = frozenset(
    {
        JobSubstatus.PREEMPTED,
        JobSubstatus.STALLED,
        JobSubstatus.ERRORED,
        JobSubstatus.COMPLETED,
        JobSubstatus.FAILED,
        JobSubstatus.CANCELED,
    }
)
_RESTARTED = frozenset({JobSubstatus.PREEMPTED, JobSubstatus.STALLED, JobSubstatus.ERRORED})


def _counted(n: int, what: str) -> str:
    """``1 preemption``, ``2 preemptions``; ``2 restarts on errors``."""
    if n == 1:
        return f"{n} {what}"
    noun, _, rest = what.partition(" ")
    return " ".join(p for p in (f"{n} {noun}s", rest) if p)


def ending_limit(job: JobDoc) -> str | None:
    """The limit of the policy that ended a FAILED job, with the count that
    passed it (``max_preemptions=5 (6 preemptions)``), for a person reading
    the job beside its counters; None when no limit ended it (it runs, it
    completed or was canceled, or it failed another way: an error with no
    restart allowed, which ``error_reason`` does not call a limit either).

    Read from the job as the policy left it: the move before the job's end
    (its first terminal history line; late events may add notes after it)
    was a loss or a restart when ``next_attempt`` gave up, else it was the
    last exit of the trainer.
    """
    if job.status != JobStatus.FAILED:
        return None
    ends = [i for i, entry in enumerate(job.history) if entry.status in JobStatus.terminal()]
    if not ends or ends[0] == 0:
        return None
    before = job.history[ends[0] - 1].substatus
    spec = job.spec
    limit = spec.max_preemptions
    if before == JobSubstatus.PREEMPTED and limit is not None and job.preemptions > limit:
        return f"max_preemptions={limit} ({_counted(job.preemptions, 'preemption')})"
    if before in _RESTARTED:
        return f"max_attempts={spec.max_attempts} ({_counted(job.attempt, 'attempt')})"
    last = next((r for r in job.attempts if r.attempt == job.attempt), None)
    if last is not None and last.outcome == "failed" and spec.max_restarts_on_errors:
        restarts = _counted(job.restarts_on_errors, "restart on errors")
        return f"max_restarts_on_errors={spec.max_restarts_on_errors} ({restarts})"
    return None


def attempt_endings(job: JobDoc) -> dict[int, str]:
    """How each attempt that has ended ended, as ``STATUS/SUBSTATUS`` of the
    history line that ended it (``RECOVERING/ERRORED``: restarted by this
    policy; ``RECOVERING/PREEMPTED``, ``FAILED/FAILED``, ...), by attempt."""
    endings: dict[int, str] = {}
    for entry in job.history:
        if entry.attempt is None or entry.attempt in endings:
            continue
        if entry.substatus in _ATTEMPT_ENDS:
            endings[entry.attempt] = f"{entry.status}/{entry.substatus}"
    return endings
