"""The reaper's decisions, pure (``spotline.shared.domain.reaping``): documents and a
VM listing in, actions out. No emulator; every branch of the sweep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spotline.shared.contract.events import JobFinished
from spotline.shared.domain import reaping as r
from spotline.shared.domain.cooling import claim, start_cooling
from spotline.shared.domain.documents import AttemptRecord, HeldFinish, InstanceDoc, JobDoc
from spotline.shared.domain.gang_finish import HOLD_S
from spotline.shared.domain.lifecycle import accrue
from spotline.shared.domain.liveness import NOTICE_MARGIN_S, PREEMPTION_NOTICE_S
from spotline.shared.domain.pricing import CoolingRule
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus, JobSubstatus
from spotline.shared.domain.vms import Vm, VmState
from tests.documents import T0, at, entry, instance, job, user, vm

S = JobSubstatus
I = InstanceStatus  # noqa: E741


@dataclass(frozen=True)
class Limits:
    stall_timeout_s: float = 300
    boot_timeout_s: float = 600
    request_timeout_s: float = 120
    cost_refresh_s: float = 300


LIMITS = Limits()
BOOTED: dict[str, Any] = {"booted_at": T0, "last_heartbeat_at": T0}


def vms_stage(
    instances: list[InstanceDoc],
    vms: list[Vm],
    jobs: list[JobDoc],
    now_s: float = 10,
    stopped: list[InstanceDoc] | None = None,
) -> list[r.VmAction]:
    by_id = {j.job_id: j for j in jobs}
    return r.decide_vms(instances, stopped or [], vms, by_id, LIMITS, at(now_s))


# -- stage 1: instances --


def test_a_healthy_vm_of_a_running_job_is_left_alone() -> None:
    assert vms_stage([instance(**BOOTED)], [vm()], [job()]) == []


def test_a_vanished_vm_of_a_running_job_is_a_missed_preemption() -> None:
    lost = instance(**BOOTED)
    [action] = vms_stage([lost], [], [job()])
    assert action == r.Recover(lost, S.PREEMPTED, r.missed_preemption_note(lost))
    assert "missed preemption" in action.note


def test_a_silent_vm_is_stalled_and_a_slow_boot_too() -> None:
    silent = instance(**BOOTED)
    [action] = vms_stage([silent], [vm()], [job()], now_s=301)
    assert isinstance(action, r.Recover) and action.cause == S.STALLED
    assert action.note == "sl-job1-a1: no heartbeat for 301 s"
    booting = instance()
    assert vms_stage([booting], [vm()], [job()], now_s=600) == []
    [slow] = vms_stage([booting], [vm()], [job()], now_s=601)
    assert isinstance(slow, r.Recover) and "not booted" in slow.note


def test_a_vm_claimed_after_cooling_longer_than_the_stall_timeout_is_not_stalled() -> None:
    """job1 ends at 0 on a booted VM, which cools until job2 claims it at 1000
    (past the 300 s stall timeout); the next sweep leaves job2 its VM."""
    rule = CoolingRule()
    cooling = start_cooling(instance(**BOOTED), T0, 3600, rule)
    claimed = claim(cooling, "job2", 1, at(1000), rule)
    job2 = job("job2", substatus=S.CONNECTING_SERVER, instance="sl-job1-a1")
    assert vms_stage([claimed], [vm()], [job2], now_s=1001) == []
    assert vms_stage([claimed], [vm()], [job2], now_s=1300) == []
    [stalled] = vms_stage([claimed], [vm()], [job2], now_s=1301)  # job2's agent never spoke
    assert isinstance(stalled, r.Recover) and stalled.cause == S.STALLED


def test_a_vm_whose_job_is_being_placed_keeps_going_even_when_missing() -> None:
    placing = job(substatus=S.REQUESTING_SERVER, status=JobStatus.QUEUING)
    assert vms_stage([instance()], [], [placing], now_s=10**4) == []


def test_a_vm_no_live_job_owns_is_released() -> None:
    for owner in (
        [],  # the job is gone
        [job(status=JobStatus.COMPLETED, substatus=S.COMPLETED)],  # ended at T0, long ago
        [job(attempt=2)],  # the job moved to its next attempt
    ):
        listed = instance(**BOOTED)
        assert vms_stage([listed], [vm()], owner, now_s=121) == [r.Release(listed)]


def test_the_vm_its_job_just_ended_on_is_left_to_that_job_s_end() -> None:
    """on_job_finished writes COMPLETED, then moves the VM to COOLING: a sweep
    in between saw a finished job's EXECUTING VM and deleted the VM meant to
    cool (seen once in test_e2e_cooling). The end lets the VM go; the reaper
    only takes over once the end has had request_timeout_s to do it."""
    done = job(status=JobStatus.COMPLETED, substatus=S.COMPLETED)
    listed = instance(**BOOTED)
    assert vms_stage([listed], [vm()], [done], now_s=120) == []
    assert vms_stage([listed], [vm()], [done], now_s=121) == [r.Release(listed)]
    # Not its VM (another attempt's, or another job's): released at once.
    older = instance(name="sl-job1-a0", attempt=0, **BOOTED)
    assert vms_stage([older], [vm("sl-job1-a0")], [done], now_s=1) == [r.Release(older)]


def test_release_is_guarded_by_a_fresh_read_of_the_instance() -> None:
    listed = instance()
    assert not r.moved_on(listed, listed)
    assert r.moved_on(listed, None)
    assert r.moved_on(listed, listed.model_copy(update={"status": I.COOLING}))  # left cooling
    assert r.moved_on(listed, listed.model_copy(update={"job_id": "job2"}))  # claimed


def test_a_closing_instance_is_finished() -> None:
    closing = instance(status=I.CLOSING)
    assert vms_stage([closing], [vm()], [job()]) == [r.FinishClosing(closing)]


def test_a_stop_under_way_is_left_to_its_function_until_it_must_have_died() -> None:
    """The race test_e2e_stopped met under load: job 1's on_job_finished wrote
    CLOSING/STOPPING and was slow to call stop; the reaper finished that stop,
    job 2 restarted the stopped VM, and the slow call then stopped job 2's VM.
    The reaper takes over a stop only once its function must have died (the
    request timeout, as for a placement); a delete it may finish at once (a
    late delete of a VM name no attempt reuses harms no one)."""
    stopping = instance(status=I.CLOSING, substatus=InstanceSubstatus.STOPPING)  # at 0 s
    assert vms_stage([stopping], [vm()], [job()], now_s=10) == []
    assert vms_stage([stopping], [vm()], [job()], now_s=120) == [r.FinishClosing(stopping)]
    deleting = instance(status=I.CLOSING, substatus=InstanceSubstatus.TERMINATING)
    assert vms_stage([deleting], [vm()], [job()], now_s=10) == [r.FinishClosing(deleting)]


def test_a_cooling_vm_is_priced_ended_when_over_and_closed_when_gone() -> None:
    cooling = instance(status=I.COOLING, cooling_since=T0, cooling_until=at(60))
    assert vms_stage([cooling], [vm()], [], now_s=59) == [r.PriceCooling(cooling)]
    assert vms_stage([cooling], [vm()], [], now_s=60) == [r.EndCooling(cooling)]
    assert vms_stage([cooling], [], [], now_s=1) == [r.LoseCooling(cooling)]


def test_a_stopped_vm_is_deleted_after_its_period_and_forgotten_when_gone() -> None:
    stopped = instance(status=I.CLOSED, substatus=InstanceSubstatus.STOPPED, stopped_until=at(100))
    assert vms_stage([], [vm(state=VmState.TERMINATED)], [], 99, [stopped]) == []
    assert vms_stage([], [vm(state=VmState.TERMINATED)], [], 100, [stopped]) == [
        r.EndStopped(stopped)
    ]
    assert vms_stage([], [], [], 1, [stopped]) == [r.ForgetStopped(stopped)]


# -- stage 1: orphans --


def labelled(job_id: str = "ghost", attempt: str = "1", state: VmState = VmState.RUNNING) -> Vm:
    labels = {"spotline-job": job_id, "spotline-attempt": attempt}
    return vm(f"sl-{job_id}-a{attempt}", state, labels)


def test_a_vm_nothing_owns_is_an_orphan() -> None:
    ghost = labelled()
    assert vms_stage([], [ghost], []) == [r.DeleteOrphan(ghost)]


def test_a_vm_being_placed_or_going_or_owned_is_no_orphan() -> None:
    placing = job("ghost", substatus=S.REQUESTING_SERVER, status=JobStatus.QUEUING)
    assert vms_stage([], [labelled()], [placing]) == []
    assert vms_stage([], [labelled(attempt="2")], [placing]) == [
        r.DeleteOrphan(labelled("ghost", "2"))
    ]
    assert vms_stage([], [labelled(state=VmState.STOPPING)], []) == []
    owned = instance("sl-ghost-a1", job_id="ghost")
    assert vms_stage([owned], [labelled()], [job("ghost")]) == []  # its instance owns it


def test_the_orphan_guard_on_fresh_reads() -> None:
    ghost = labelled()
    assert r.orphaned(ghost, None, None, T0)
    restarted = instance("sl-ghost-a1", job_id="job2", status=I.LAUNCHING)
    assert not r.orphaned(ghost, restarted, None, T0)  # a stopped VM restarted meanwhile
    stopping = instance("sl-ghost-a1", status=I.CLOSED, substatus=InstanceSubstatus.STOPPED)
    assert not r.orphaned(ghost, stopping, None, T0)
    closed = instance("sl-ghost-a1", status=I.CLOSED, substatus=InstanceSubstatus.TERMINATED)
    assert r.orphaned(ghost, closed, None, T0)
    assert r.orphaned(
        vm("odd", labels={"spotline-job": "ghost", "spotline-attempt": "x"}), None, None, T0
    )


def preempted_on_attempt_1(outcome: str = "preempted") -> JobDoc:
    """job1 moved to attempt 2 when its attempt 1's VM was reported lost at T0."""
    lost = AttemptRecord(
        attempt=1,
        instance="sl-job1-a1",
        zone="local-a",
        machine_id="g2-standard-4",
        started_at=T0,
        ended_at=T0,
        outcome=outcome,
    )
    return job(
        attempt=2, substatus=S.CONNECTING_SERVER, status=JobStatus.RECOVERING, attempts=[lost]
    )


def test_a_preempted_vm_is_left_its_notice_to_save_its_state() -> None:
    """The log sink reports a preemption at the start of Compute Engine's 30 s
    notice, while the VM saves its state: neither its instance closed PREEMPTED
    (the VM is then owned by nothing) nor, when the report's function died
    before closing it, its instance still open is cut short."""
    preempted = vm(labels={"spotline-job": "job1", "spotline-attempt": "1"})
    moved = preempted_on_attempt_1()
    notice_s = PREEMPTION_NOTICE_S + NOTICE_MARGIN_S
    assert vms_stage([], [preempted], [moved], now_s=notice_s - 1) == []
    assert vms_stage([], [preempted], [moved], now_s=notice_s) == [r.DeleteOrphan(preempted)]
    still_open = instance(**BOOTED)
    assert vms_stage([still_open], [preempted], [moved], now_s=notice_s - 1) == []
    assert vms_stage([still_open], [preempted], [moved], now_s=notice_s) == [r.Release(still_open)]
    # Gone already, or stalled rather than preempted: no notice to wait out.
    assert vms_stage([still_open], [], [moved], now_s=1) == [r.Release(still_open)]
    stalled = preempted_on_attempt_1("stalled")
    assert vms_stage([], [preempted], [stalled], now_s=1) == [r.DeleteOrphan(preempted)]


def test_the_orphan_guard_leaves_a_vm_closed_preempted_its_notice() -> None:
    ghost = labelled()
    closed = instance(
        "sl-ghost-a1",
        job_id="ghost",
        status=I.CLOSED,
        substatus=InstanceSubstatus.PREEMPTED,
        closed_at=T0,
    )
    notice_s = PREEMPTION_NOTICE_S + NOTICE_MARGIN_S
    assert not r.orphaned(ghost, closed, None, at(notice_s - 1))
    assert r.orphaned(ghost, closed, None, at(notice_s))


# -- stage 2: jobs --


def test_a_running_job_accrues_its_cost() -> None:
    running = job()
    assert r.decide_jobs([running], LIMITS, at(10)) == [r.Accrue(running)]
    waiting = job(substatus=S.WAITING_FOR_QUOTA, status=JobStatus.QUEUING)
    assert r.decide_jobs([waiting], LIMITS, at(10)) == []


def test_a_running_job_is_priced_again_only_once_its_cost_is_cost_refresh_s_old() -> None:
    priced = job(cost_as_of=at(100))
    assert r.decide_jobs([priced], LIMITS, at(399)) == []
    assert r.decide_jobs([priced], LIMITS, at(400)) == [r.Accrue(priced)]
    never = job()  # placed, never priced yet
    assert r.decide_jobs([never], LIMITS, at(1)) == [r.Accrue(never)]


def test_pricing_a_job_records_when() -> None:
    assert accrue(job(), at(42)).cost_as_of == at(42)


def test_a_job_past_its_max_runtime_is_canceled() -> None:
    limited = job(spec={"max_runtime_s": 60})
    assert r.decide_jobs([limited], LIMITS, at(60)) == [r.Accrue(limited)]
    assert r.decide_jobs([limited], LIMITS, at(61)) == [
        r.Accrue(limited),
        r.Cancel(limited, "max_runtime_s=60 s reached"),
    ]


def test_a_job_stuck_in_requesting_server_is_placed_again() -> None:
    stuck = job(substatus=S.REQUESTING_SERVER, status=JobStatus.QUEUING)
    assert r.decide_jobs([stuck], LIMITS, at(120)) == []
    assert r.decide_jobs([stuck], LIMITS, at(121)) == [r.PlaceAgain(stuck)]
    over = job(substatus=S.REQUESTING_SERVER, status=JobStatus.QUEUING, spec={"max_runtime_s": 1})
    assert r.decide_jobs([over], LIMITS, at(121)) == [r.Cancel(over, "max_runtime_s=1 s reached")]


# -- stage 3: the queue --


def test_a_job_waiting_for_quota_is_retried_by_ops() -> None:
    waiting = entry(reason="quota")
    assert r.decide_queue([waiting], {}, at(1)) == [r.RetryQuota(waiting)]


def test_a_job_waiting_for_capacity_is_retried_until_it_gives_up() -> None:
    waiting = job(
        substatus=S.WAITING_FOR_CAPACITY, status=JobStatus.QUEUING, spec={"wait_request_s": 60}
    )
    queued = entry(tries=2, last_error="no room")
    jobs = {"job1": waiting}
    assert r.decide_queue([queued], jobs, at(59)) == [r.RetryPlacement(waiting, queued)]
    [gave_up] = r.decide_queue([queued], jobs, at(60))  # one option: its 60 s window is out
    assert isinstance(gave_up, r.GiveUp) and "wait_request_s=60" in gave_up.reason


def test_a_stale_queue_entry_is_dropped() -> None:
    queued = entry()
    for jobs in (
        {},
        {"job1": job(status=JobStatus.CANCELED, substatus=S.CANCELED)},
        {"job1": job(attempt=2, substatus=S.REQUESTING_SERVER, status=JobStatus.RECOVERING)},
        {"job1": job()},  # placed meanwhile
    ):
        assert r.decide_queue([queued], jobs, at(1)) == [r.DropEntry(queued)]


# -- stage 4: slots --


def test_slots_of_ended_or_missing_jobs_are_freed() -> None:
    alice = user(active_jobs=("job1", "job2", "job3"))
    jobs = {"job1": job(), "job2": job("job2", status=JobStatus.FAILED, substatus=S.FAILED)}
    assert r.decide_slots([alice], jobs, {}) == [
        r.FreeJobSlot("alice", "job2"),
        r.FreeJobSlot("alice", "job3"),
    ]


def test_an_instance_slot_is_kept_while_its_vm_lives_or_is_being_made() -> None:
    alice = user(active_instances=("sl-job1-a1", "sl-job2-a1", "sl-job3-a1", "sl-job4-a1"))
    placing = job("job2", substatus=S.REQUESTING_SERVER, status=JobStatus.QUEUING)
    jobs = {"job1": job(), "job2": placing, "job3": job("job3", attempt=2)}
    instances = {
        "sl-job1-a1": instance(),
        "sl-job3-a1": instance("sl-job3-a1", "job3", status=I.CLOSED),
    }
    assert r.decide_slots([alice], jobs, instances) == [
        r.FreeInstanceSlot("alice", "sl-job3-a1"),  # closed
        r.FreeInstanceSlot("alice", "sl-job4-a1"),  # never made, nothing placing it
    ]


def test_a_stopped_slot_is_kept_while_its_vm_is_stopped_or_stopping() -> None:
    alice = user(stopped_instances=("a", "b", "c"))
    instances = {
        "a": instance("a", status=I.CLOSED, substatus=InstanceSubstatus.STOPPED),
        "b": instance("b", status=I.CLOSING, substatus=InstanceSubstatus.STOPPING),
    }
    assert r.decide_slots([alice], {}, instances) == [r.FreeStoppedSlot("alice", "c")]
    restarted = instance("a", status=I.LAUNCHING)
    assert r.stopped_slot_stale(restarted) and not r.stopped_slot_stale(instances["a"])


def test_only_users_with_a_slot_the_listings_do_not_show_held_are_in_doubt() -> None:
    fine = user("ann", ("job1",), ("sl-job1-a1",), ("sl-old-a1",))
    ended = user("bob", active_jobs=("job9",))  # not listed active
    closed = user("cat", active_instances=("sl-job8-a1",))  # not listed live
    restarted = user("dan", stopped_instances=("sl-job1-a1",))  # live, not stopped
    users = [fine, ended, closed, restarted, user("eve")]
    doubt = r.users_in_doubt(users, {"job1"}, {"sl-job1-a1"}, {"sl-old-a1"})
    assert doubt == ["bob", "cat", "dan"]
    # Each slot stage 4 frees is one its user is in doubt for.
    jobs = {"job1": job()}
    instances = {"sl-job1-a1": instance(), "sl-old-a1": instance("sl-old-a1", status=I.CLOSED)}
    stopped = instances["sl-old-a1"].model_copy(update={"substatus": InstanceSubstatus.STOPPED})
    freed = r.decide_slots(users, jobs, {**instances, "sl-old-a1": stopped})
    assert {action.user for action in freed} == {"bob", "cat", "dan"}


def test_the_instance_slot_guard_sees_a_placement_that_finished_meanwhile() -> None:
    placed = job("job2", substatus=S.CONNECTING_SERVER, status=JobStatus.QUEUING)
    assert r.instance_slot_stale("sl-job2-a1", placed, None)
    assert not r.instance_slot_stale("sl-job2-a1", placed, instance("sl-job2-a1", "job2"))
    assert r.job_of_vm("sl-job2-a1") == "job2" and r.job_of_vm("other") == ""


def test_a_gang_nodes_exit_held_past_the_notice_is_judged() -> None:
    """``spotline.shared.domain.gang_finish``: within its window the finish
    waits for a preemption of another node of the attempt; past it, judged."""
    nodes = ["sl-job1-a1-n0", "sl-job1-a1-n1"]
    finished = JobFinished(job_id="job1", attempt=1, instance=nodes[0], sent_at=T0, exit_code=1)
    held = job(
        spec={"nodes": 2},
        cost_as_of=at(0),
        instance=nodes[0],
        nodes=nodes,
        held_finish=HeldFinish(event=finished, since=at(0)),
    )
    assert r.decide_jobs([held], LIMITS, at(HOLD_S - 1)) == []
    assert r.decide_jobs([held], LIMITS, at(HOLD_S)) == [r.JudgeFinish(held)]


def test_a_gang_node_silent_after_its_held_finish_is_not_stalled() -> None:
    """Its agent reported the exit and stopped beating: the silence is the
    finish, which stage 2 judges when its window ends (a stall timeout shorter
    than the window restarted the gang again and again). A node gone from the
    listing is still a preemption, which the hold waits for."""
    nodes = ["sl-job1-a1-n0", "sl-job1-a1-n1"]
    finished = JobFinished(job_id="job1", attempt=1, instance=nodes[0], sent_at=T0, exit_code=1)
    held = job(
        spec={"nodes": 2},
        instance=nodes[0],
        nodes=nodes,
        held_finish=HeldFinish(event=finished, since=at(0)),
    )
    silent = [instance(name, **BOOTED) for name in nodes]
    vms = [vm(name) for name in nodes]

    assert vms_stage(silent, vms, [held], now_s=301) == []
    [lost] = vms_stage(silent, vms[:1], [held], now_s=301)
    assert isinstance(lost, r.Recover) and lost.cause == S.PREEMPTED
    # Another attempt's hold masks nothing.
    older = held.model_copy(update={"held_finish": HeldFinish(
        event=finished.model_copy(update={"attempt": 0}), since=at(0))})  # fmt: skip
    assert len(vms_stage(silent, vms, [older], now_s=301)) == 2
