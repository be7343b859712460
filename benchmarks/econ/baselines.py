"""The comparisons, modelled (they are not spotline's code, nor anybody's):
restart from scratch on Spot, and a SkyPilot-like periodic-checkpoint poller.

SkyPilot's managed jobs (``sky/jobs/recovery_strategy.py``) poll the job's
status, notice a preempted cluster once its VMs are gone, and relaunch; a
launch that fails retries after ``common_utils.Backoff(RETRY_INIT_GAP_SECONDS
= 60)``, growing. The job resumes from its own last periodic checkpoint. Here
capacity is always there for the relaunch, so that backoff is never reached:
its relaunch is detection (``Params.detect_s``), the deletion of a gang's
other nodes (``Params.delete_s``), then boot, which favours it.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.econ.model import Job, Outcome, Params
from benchmarks.econ.traces import Trace
from spotline.shared.domain.liveness import NOTICE_MARGIN_S
from spotline.shared.domain.pricing import vm_cost


@dataclass(frozen=True)
class Policy:
    """How a strategy loses and regains a gang.

    Attributes:
        saves_on_notice: the trainer checkpoints on the 30 s notice (spotline):
            whichever node of a gang gets it (its ranks agree on the step,
            rank 0 saves it; the noticed node's agent reports a step later).
        periodic: the trainer checkpoints every ``Params.period_s`` of progress.
        acts_on_notice: the controller hears of the preemption at the notice
            (the agent's report) and deletes the VMs then; otherwise it sees the
            VMs gone at the end of the notice, ``Params.detect_s`` later.
        overlaps_deletes: the next attempt is inserted at the report, while
            the lost VMs are deleted, and restores once they are gone (the
            restore gate); otherwise it is inserted once they are gone.
    """

    name: str
    saves_on_notice: bool
    periodic: bool
    acts_on_notice: bool
    overlaps_deletes: bool = False


SCRATCH = Policy("scratch on Spot", saves_on_notice=False, periodic=False, acts_on_notice=True)
SKYPILOT_LIKE = Policy(
    "SkyPilot-like poller", saves_on_notice=False, periodic=True, acts_on_notice=False
)
# The same model with spotline's behaviour: the tests hold spotline's real
# code to it, so a delay the code adds (or loses) shows.
SPOTLINE_MODEL = Policy(
    "spotline (model)",
    saves_on_notice=True,
    periodic=False,
    acts_on_notice=True,
    overlaps_deletes=True,
)


def run(policy: Policy, job: Job, trace: Trace, params: Params) -> Outcome:
    """One run of ``job`` under ``trace``: launch, train, lose the gang at each
    preemption that hits one of its VMs, relaunch, until the work is done or
    ``params.max_hours`` have passed. Every VM bills from its launch until it
    is gone: the preempted one at its notice's end, the others of a gang
    ``delete_s`` after they are deleted, all of them ``delete_s`` after the
    end."""
    events = [(p.t_h * 3600, p.node) for p in trace.for_nodes(job.nodes)]
    limit_s = params.max_hours * 3600
    saved = 0.0  # progress kept in the last checkpoint, seconds of work
    vm_s = 0.0
    preemptions = 0
    start = 0.0  # the first VM is asked for at the submission
    gate = 0.0  # when the attempt may restore: its predecessor's VMs gone
    i = 0
    while True:
        train_start = max(start + params.boot_s, gate)
        end = train_start + (job.work_s - saved)
        while i < len(events) and events[i][0] < start:
            i += 1  # nothing of the job's was up there then
        hit, node = events[i] if i < len(events) else (None, 0)
        if (hit is None or hit >= end) and end <= limit_s:
            done = end + _finish_s(policy, params)
            vm_s += job.nodes * (done + params.delete_s - start)
            return _outcome(policy, job, vm_s, done, job.work_s, preemptions, True)
        if hit is None or hit >= limit_s:
            vm_s += job.nodes * (limit_s - start)
            kept = saved + max(0.0, limit_s - train_start)
            return _outcome(policy, job, vm_s, limit_s, kept, preemptions, False)
        preemptions += 1
        trained = hit > train_start
        progress = saved + max(0.0, hit - train_start)
        wrote = 0.0  # notice -> the report: the checkpoint written, or a step
        if policy.saves_on_notice and trained:
            saved = params.saved_on_notice(progress)
            # Another node's report comes once its ranks stopped (node 0's
            # save goes on, within its delete's graceful shutdown).
            wrote = params.checkpoint_s if node == 0 else params.step_s
        elif policy.periodic:
            saved = max(saved, params.saved_by_period(progress))
        elif not policy.saves_on_notice:
            saved = 0.0
        noticed_end = hit + params.notice_s  # Compute Engine takes the VM then
        others = job.nodes - 1
        if policy.acts_on_notice:
            # The report delivered, the lost VMs deleted together (the one in
            # its notice gone at the notice's end; a log-sink report keeps it,
            # and Compute Engine takes it then), then the replacement inserted.
            reported = hit + wrote + params.deliver_s
            waits = [params.delete_s] if others else []
            if trained:
                waits.append(max(0.0, noticed_end - reported))
            relaunch = reported + max(waits, default=0.0)
            others_gone = reported + params.delete_s
            gate = 0.0
            if policy.overlaps_deletes:
                # Inserted at once; it restores once the lost VMs are gone:
                # the deleted ones when their deletes return, one kept
                # through its notice (a log-sink report) at the notice's end
                # (and its margin) unless it is deleted first.
                gate = relaunch
                relaunch = reported
                if not trained:
                    gate = max(gate, reported + params.notice_s + NOTICE_MARGIN_S)
        else:
            # The poller sees the VM gone at the notice's end, ``detect_s``
            # later; the rest of a gang is deleted before it relaunches.
            gate = 0.0
            detected = noticed_end + params.detect_s
            others_gone = detected + params.delete_s
            relaunch = others_gone if others else detected
        vm_s += (noticed_end - start) + others * (others_gone - start)
        start = relaunch
        i += 1


def _finish_s(policy: Policy, params: Params) -> float:
    """The finish event's delivery, after the trainer's end, ends the job."""
    return params.deliver_s if policy.acts_on_notice else 0.0


def _outcome(
    policy: Policy,
    job: Job,
    vm_s: float,
    makespan_s: float,
    kept_s: float,
    preemptions: int,
    finished: bool,
) -> Outcome:
    return Outcome(
        strategy=policy.name,
        cost_usd=vm_cost(job.machine.spot_usd_per_hour, vm_s),
        makespan_s=makespan_s,
        vm_s=vm_s,
        kept_s=kept_s,
        preemptions=preemptions,
        finished=finished,
    )
