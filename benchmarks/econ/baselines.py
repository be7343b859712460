"""The comparisons, modelled (they are not spotline's code, nor anybody's):
restart from scratch on Spot, and a SkyPilot-like periodic-checkpoint poller.

SkyPilot's managed jobs (``sky/jobs/recovery_strategy.py``) poll the job's
status, notice a preempted cluster once its VMs are gone, and relaunch; a
launch that fails retries after ``common_utils.Backoff(RETRY_INIT_GAP_SECONDS
= 60)``, growing. The job resumes from its own last periodic checkpoint. Here
capacity is always there for the relaunch, so that backoff is never reached:
its relaunch is detection (``Params.detect_s``) + boot, which favours it.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.econ.model import Job, Outcome, Params
from benchmarks.econ.traces import Trace
from shared.domain.pricing import vm_cost


@dataclass(frozen=True)
class Policy:
    """How a strategy loses and regains a gang.

    Attributes:
        saves_on_notice: the trainer checkpoints on the 30 s notice (spotline).
        periodic: the trainer checkpoints every ``Params.period_s`` of progress.
        acts_on_notice: the controller hears of the preemption at the notice
            (the agent's report) and deletes the VMs then; otherwise it sees the
            VMs gone at the end of the notice, ``Params.detect_s`` later.
    """

    name: str
    saves_on_notice: bool
    periodic: bool
    acts_on_notice: bool


SCRATCH = Policy("scratch on Spot", saves_on_notice=False, periodic=False, acts_on_notice=True)
SKYPILOT_LIKE = Policy(
    "SkyPilot-like poller", saves_on_notice=False, periodic=True, acts_on_notice=False
)
# The same model with spotline's behaviour: the tests hold spotline's real
# code to it, so a delay the code adds (or loses) shows.
SPOTLINE_MODEL = Policy(
    "spotline (model)", saves_on_notice=True, periodic=False, acts_on_notice=True
)


def run(policy: Policy, job: Job, trace: Trace, params: Params) -> Outcome:
    """One run of ``job`` under ``trace``: launch, train, lose the gang at each
    preemption that hits one of its VMs, relaunch, until the work is done or
    ``params.max_hours`` have passed."""
    events = [(p.t_h * 3600, p.node) for p in trace.for_nodes(job.nodes)]
    limit_s = params.max_hours * 3600
    saved = 0.0  # progress kept in the last checkpoint, seconds of work
    vm_s = 0.0
    preemptions = 0
    start = 0.0  # the first VM is asked for at the submission
    i = 0
    while True:
        train_start = start + params.boot_s
        end = train_start + (job.work_s - saved)
        while i < len(events) and events[i][0] < start:
            i += 1  # nothing of the job's was up there then
        hit = events[i][0] if i < len(events) else None
        if (hit is None or hit >= end) and end <= limit_s:
            vm_s += job.nodes * (end + _finish_s(policy, params) - start)
            done = end + _finish_s(policy, params)
            return _outcome(policy, job, vm_s, done, job.work_s, preemptions, True)
        if hit is None or hit >= limit_s:
            vm_s += job.nodes * (limit_s - start)
            kept = saved + max(0.0, limit_s - train_start)
            return _outcome(policy, job, vm_s, limit_s, kept, preemptions, False)
        preemptions += 1
        progress = saved + max(0.0, hit - train_start)
        if policy.saves_on_notice and hit > train_start:
            saved = params.saved_on_notice(progress)
        elif policy.periodic:
            saved = max(saved, params.saved_by_period(progress))
        elif not policy.saves_on_notice:
            saved = 0.0
        if policy.acts_on_notice:
            # The agent's report after its checkpoint (none while booting or
            # with nothing to save), delivered; the VMs are deleted then and
            # the replacement inserted at once.
            wrote = params.checkpoint_s if policy.saves_on_notice and hit > train_start else 0.0
            gone = hit + wrote + params.deliver_s
            relaunch = gone
        else:
            gone = hit + params.notice_s  # Compute Engine stops the VMs
            relaunch = gone + params.detect_s
        vm_s += job.nodes * (gone - start)
        start = relaunch
        i += 1


def _finish_s(policy: Policy, params: Params) -> float:
    """The VMs outlive the trainer by the finish event's delivery."""
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
