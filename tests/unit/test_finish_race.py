"""The trainer exits and, at once, its Spot VM is preempted. The
JobFinished and the preemption's reports (the log sink's entry, the agent's or
its shutdown script's SpotPreempted) travel on different subscriptions and
arrive in either order, redelivered, with the reaper sweeping in between.

Each order is driven through the real handlers in a ``tests.replay`` World: a
job of one epoch, booted and trained, whose agent then publishes JobFinished
while the VM is taken. A job whose trainer exited 0 completes on that attempt,
with no preemption counted and nothing left behind (``replay_checks``); a
non-zero exit is the trainer's own failure only when it comes before any
report of the preemption.
"""

from __future__ import annotations

import pytest

from spotline.shared.contract.events import SpotPreempted
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.replay import PROJECT, STEP_S, AgentSim, Plan, Published, World, log_entry
from tests.replay_checks import problems

VM = "sl-c-a1"


def trained(world: World, plan: Plan) -> AgentSim:
    """Job c submitted, booted and through its epochs: the trainer is about to exit."""
    world.plans[plan.job_id] = plan
    for _ in range(3 + plan.epochs):  # submitted, booted, training, the epochs
        world.run_step()
    return world.agents[VM]


def reports(world: World, agent: AgentSim, who: str) -> list[Published]:
    """The preemption's reports: the log sink's entry, the agent's SpotPreempted
    (from its shutdown script, which publishes it when the VM is preempted
    whatever the agent did), or both. Handed out by the test, not the policy."""
    made = []
    if who in ("agent", "both"):
        saved = agent.last_epoch
        event = SpotPreempted(
            **agent.common(),
            checkpoint_uri=saved.checkpoint_uri if saved else None,
            step=saved.step if saved else None,
        )
        made.append(world.publish("spot_preempted", event, scheduled=False))
    if who in ("log-sink", "both"):
        made.append(
            world.publish(
                "spot_preempted",
                log_entry(PROJECT, agent.zone, VM, agent.instance_id),
                scheduled=False,
            )
        )
    return made


def race(
    world: World, agent: AgentSim, who: str, *, finish_first: bool, exit_code: int = 0
) -> tuple[list[Published], list[Published]]:
    """The trainer exits with ``exit_code`` and the VM is taken at once; the
    finish (with the RETURNING heartbeat) and the reports are delivered in the
    order asked. Returns (the finish's messages, the reports) for redelivery."""
    world.advance()
    agent.finish(exit_code)
    world.cloud.preempt(VM, zone=agent.zone, notice_s=0.0)
    finished = world.delivery.take(world.step)
    sent = reports(world, agent, who)
    for message in [*finished, *sent] if finish_first else [*sent, *finished]:
        assert world.deliver(message), world.failures
    return finished, sent


def end(world: World) -> JobDoc:
    world.run([])
    world.settle()
    job = world.memory.get_job("c")
    assert job is not None
    return job


def completed_on_attempt_1(world: World, job: JobDoc) -> None:
    assert world.failures == []
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.COMPLETED, 1, 0)
    assert job.progress == "1/1"
    assert job.attempts[0].outcome == "completed"
    assert problems(world) == []


@pytest.mark.parametrize("who", ["log-sink", "agent", "both"])
@pytest.mark.parametrize("finish_first", [True, False], ids=["finish-first", "report-first"])
def test_a_trainer_that_exited_0_completes_its_attempt_whichever_comes_first(
    who: str, finish_first: bool
) -> None:
    with World() as world:
        agent = trained(world, Plan("c", "alice", epochs=1, submit_step=1))
        race(world, agent, who, finish_first=finish_first)
        job = end(world)
    completed_on_attempt_1(world, job)


@pytest.mark.parametrize("who", ["log-sink", "agent"])
@pytest.mark.parametrize("finish_first", [True, False], ids=["finish-first", "report-first"])
def test_redelivered_finish_and_reports_change_nothing_more(who: str, finish_first: bool) -> None:
    with World() as world:
        agent = trained(world, Plan("c", "alice", epochs=1, submit_step=1))
        finished, sent = race(world, agent, who, finish_first=finish_first)
        once = world.memory.get_job("c")
        for message in [*sent, *finished, *finished, *sent]:
            assert world.deliver(message), world.failures
        again = world.memory.get_job("c")
        assert again is not None and once is not None
        assert (again.status, again.attempt, again.history) == (
            once.status,
            once.attempt,
            once.history,
        )
        job = end(world)
    completed_on_attempt_1(world, job)


def test_the_late_finish_lets_go_of_the_next_attempts_vm_and_keeps_its_cost() -> None:
    """The report placed attempt 2 at once: its VM exists when the finish
    comes. It goes, and what it cost stays on the job's bill."""
    with World() as world:
        agent = trained(world, Plan("c", "alice", epochs=1, submit_step=1))
        race(world, agent, "log-sink", finish_first=False)
        second = world.memory.get_instance("sl-c-a2")
        assert second is not None and second.status == "CLOSED"
        assert world.cloud.get("sl-c-a2") is None
        job = end(world)
    completed_on_attempt_1(world, job)
    _, superseded = job.attempts
    assert (superseded.attempt, superseded.outcome) == (2, "superseded")
    assert job.instance == VM and job.substatus == JobSubstatus.COMPLETED
    assert [h.substatus for h in job.history][-1] == JobSubstatus.COMPLETED
    assert "exited 0" in job.history[-1].note


def test_a_late_finish_with_cooling_completes_and_cools_nothing() -> None:
    """The job asks to keep its VM cooling; the VM was preempted: none cools."""
    with World() as world:
        plan = Plan("c", "alice", epochs=1, submit_step=1, cool_down_s=120)
        agent = trained(world, plan)
        finished, _ = race(world, agent, "log-sink", finish_first=False)
        for message in finished:  # redelivered
            assert world.deliver(message), world.failures
        job = end(world)
    completed_on_attempt_1(world, job)


def test_a_finish_after_the_reaper_saw_the_vm_gone_completes_the_job() -> None:
    """Nobody reports the preemption: the reaper finds the VM gone and starts
    attempt 2, then the finish comes."""
    with World() as world:
        agent = trained(world, Plan("c", "alice", epochs=1, submit_step=1))
        world.advance()
        agent.finish(0)
        world.cloud.preempt(VM, zone=agent.zone, notice_s=0.0)
        finished = world.delivery.take(world.step)
        assert world.deliver(world.tick(scheduled=False))
        job = world.memory.get_job("c")
        assert job is not None and job.attempt == 2  # the reaper recovered it
        for message in finished:
            assert world.deliver(message), world.failures
        job = end(world)
    completed_on_attempt_1(world, job)


@pytest.mark.parametrize("exit_code", [143, -15, 3])
def test_a_non_zero_exit_after_the_preemption_was_reported_does_not_fail_the_job(
    exit_code: int,
) -> None:
    """Reported first, the preemption has the job on attempt 2; the trainer's
    exit (the preemption's SIGTERM, or its own error) fails nothing: the next
    attempt resumes and decides."""
    with World() as world:
        plan = Plan("c", "alice", epochs=1, submit_step=1)
        agent = trained(world, plan)
        race(world, agent, "log-sink", finish_first=False, exit_code=exit_code)
        job = world.memory.get_job("c")
        assert job is not None and job.status != JobStatus.FAILED
        plan.losses[1] = (1, "log-sink")  # what the world saw: attempt 1 lost
        job = end(world)
    assert world.failures == []
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.COMPLETED, 2, 1)
    assert problems(world) == []


def test_a_non_zero_exit_before_any_report_fails_the_job() -> None:
    """The agent publishes JobFinished only when no notice came before the
    trainer ended (a notice makes it report SpotPreempted instead): a non-zero
    exit reported first is the trainer's own failure, and the report after it
    is late."""
    with World() as world:
        plan = Plan("c", "alice", epochs=1, submit_step=1, fail_epoch=2)
        agent = trained(world, plan)
        race(world, agent, "both", finish_first=True, exit_code=3)
        job = end(world)
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.FAILED, 1, 0)
    assert job.error is not None and "exited with code 3" in job.error
    assert problems(world) == []


def test_a_late_finish_while_the_next_attempt_trains_lets_it_carry_on() -> None:
    """Attempt 2 already trains (it resumed from attempt 1's last checkpoint):
    the late finish is written in the history, and attempt 2 ends the job."""
    with World() as world:
        plan = Plan("c", "alice", epochs=1, submit_step=1)
        agent = trained(world, plan)
        world.advance()
        agent.finish(0)
        world.cloud.preempt(VM, zone=agent.zone, notice_s=0.0)
        finished = world.delivery.take(world.step)
        for message in reports(world, agent, "log-sink"):
            assert world.deliver(message)
        plan.losses[1] = (1, "log-sink")
        for _ in range(2):  # attempt 2 boots, then trains
            world.run_step()
        job = world.memory.get_job("c")
        assert job is not None and (job.attempt, job.substatus) == (2, JobSubstatus.TRAINING)
        for message in [*finished, *finished]:
            assert world.deliver(message), world.failures
        job = world.memory.get_job("c")
        assert job is not None and (job.attempt, job.substatus) == (2, JobSubstatus.TRAINING)
        notes = [h.note for h in job.history if "attempt 1 finished" in h.note]
        assert len(notes) == 1, notes
        job = end(world)
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.COMPLETED, 2, 1)
    assert problems(world) == []


def test_a_late_finish_of_an_attempt_two_back_is_stale() -> None:
    """Only the attempt just before the current one can have finished
    unnoticed: an older one's finish is recorded nowhere."""
    with World() as world:
        plan = Plan("c", "alice", epochs=1, submit_step=1)
        agent = trained(world, plan)
        world.advance()
        agent.finish(0)
        world.cloud.preempt(VM, zone=agent.zone, notice_s=0.0)
        finished = world.delivery.take(world.step)
        for message in reports(world, agent, "log-sink"):
            assert world.deliver(message)
        # Attempt 2's VM is taken before it boots, reported by the sink: attempt 3.
        world.cloud.preempt("sl-c-a2", zone=agent.zone, notice_s=0.0)
        second = world.memory.get_instance("sl-c-a2")
        assert second is not None
        entry = log_entry(PROJECT, second.zone, "sl-c-a2", second.instance_id or "")
        assert world.deliver(world.publish("spot_preempted", entry, scheduled=False))
        world.advance(STEP_S)
        for message in finished:
            assert world.deliver(message), world.failures
        job = world.memory.get_job("c")
        assert job is not None and (job.status, job.attempt) == (JobStatus.RECOVERING, 3)
        plan.losses.update({1: (1, "log-sink"), 2: (0, "log-sink")})
        job = end(world)
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.COMPLETED, 3, 2)
    assert problems(world) == []
