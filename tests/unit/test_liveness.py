"""The reaper's checks of one instance, pure: stalls, being placed, ownership."""

from __future__ import annotations

from spotline.shared.domain.cooling import claim, start_cooling
from spotline.shared.domain.liveness import (
    Owner,
    being_placed,
    belongs_to,
    finishing,
    if_owned,
    serves_its_job,
    stall_note,
    vm_being_placed,
)
from spotline.shared.domain.pricing import CoolingRule
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from spotline.shared.domain.stopping import restarted
from tests.documents import at, instance, job

S = JobSubstatus


def test_a_booted_vm_stalls_after_the_stall_timeout_from_its_last_heartbeat() -> None:
    alive = instance(booted_at=at(0), last_heartbeat_at=at(100))
    assert stall_note(alive, at(400), stall_timeout_s=300, boot_timeout_s=600) is None
    note = stall_note(alive, at(401), stall_timeout_s=300, boot_timeout_s=600)
    assert note == "sl-job1-a1: no heartbeat for 301 s"


def test_a_vm_not_booted_stalls_after_the_boot_timeout() -> None:
    booting = instance()  # created at 0
    assert stall_note(booting, at(600), stall_timeout_s=1, boot_timeout_s=600) is None
    assert stall_note(booting, at(601), 1, 600) == "sl-job1-a1: not booted for 601 s"


def test_a_restarted_vm_counts_from_its_restart() -> None:
    restarted = instance(segment_started_at=at(1000))
    assert stall_note(restarted, at(1500), stall_timeout_s=1, boot_timeout_s=600) is None


def test_a_claimed_vm_counts_from_its_claim_not_its_previous_jobs_last_heartbeat() -> None:
    """Cooling longer than the stall timeout, then claimed: the next job's VM
    is silent only from the claim (as a restarted one is from its restart)."""
    rule = CoolingRule()
    done = instance(booted_at=at(0), last_heartbeat_at=at(100))
    claimed = claim(start_cooling(done, at(100), 3600, rule), "job2", 1, at(1000), rule)
    assert stall_note(claimed, at(1300), stall_timeout_s=300, boot_timeout_s=600) is None
    note = stall_note(claimed, at(1301), stall_timeout_s=300, boot_timeout_s=600)
    assert note == "sl-job1-a1: no heartbeat for 301 s"
    heard = claimed.model_copy(update={"last_heartbeat_at": at(1200)})  # job2's agent
    assert stall_note(heard, at(1500), stall_timeout_s=300, boot_timeout_s=600) is None


def test_an_instance_belongs_to_one_attempt_of_one_job() -> None:
    mine = instance()
    assert belongs_to(mine, Owner("job1", 1)) and Owner.of(mine) == Owner("job1", 1)
    assert not belongs_to(mine, Owner("job1", 2))
    assert not belongs_to(mine, Owner("job2", 1))
    assert Owner.of(job("job2", attempt=3)) == Owner("job2", 3)


def test_a_change_on_behalf_of_a_job_applies_only_while_the_instance_is_its() -> None:
    rule = CoolingRule()
    cool = if_owned(Owner("job1", 1), lambda i: start_cooling(i, at(10), 60, rule))
    assert cool(instance()).status == InstanceStatus.COOLING
    # Claimed by job2 (one attempt each), or restarted for it: left as it is.
    cooling = start_cooling(instance(), at(10), 60, rule)
    claimed = claim(cooling, "job2", 1, at(20), rule)
    assert cool(claimed) is claimed
    stopped = instance(status=InstanceStatus.CLOSED, substatus="STOPPED", stopped_until=at(99))
    relaunched = restarted(stopped, "job2", 1, at(20))
    assert relaunched.job_id == "job2" and cool(relaunched) is relaunched
    later_attempt = if_owned(Owner("job1", 2), lambda i: start_cooling(i, at(10), 60, rule))
    assert later_attempt(instance()) == instance()


def test_a_vm_claimed_by_the_next_job_is_neither_its_old_jobs_current_vm_nor_finishing() -> None:
    ended = job(status=JobStatus.COMPLETED, substatus=S.COMPLETED)  # ended at 0
    assert finishing(instance(), ended, at(1), grace_s=120)
    claimed = instance(job_id="job2")  # same name, same attempt number
    assert not serves_its_job(claimed, job())
    assert not finishing(claimed, ended, at(1), grace_s=120)


def test_being_placed_is_the_attempt_in_requesting_server() -> None:
    placing = job(substatus=S.REQUESTING_SERVER, status=JobStatus.QUEUING)
    assert being_placed(placing, "job1", 1)
    assert not being_placed(placing, "job1", 2)
    assert not being_placed(placing, "job2", 1)
    assert not being_placed(job(), "job1", 1)
    assert not being_placed(None, "job1", 1)
    assert vm_being_placed("sl-job1-a1", placing)
    assert not vm_being_placed("sl-job1-a2", placing)
    assert not vm_being_placed("not-a-spotline-name", placing)


def test_an_instance_serves_its_live_jobs_current_attempt_only() -> None:
    assert serves_its_job(instance(), job())
    assert not serves_its_job(instance(), None)
    assert not serves_its_job(instance(), job(attempt=2))
    assert not serves_its_job(instance(), job(status=JobStatus.COMPLETED, substatus=S.COMPLETED))
    assert not serves_its_job(instance(name="sl-job1-old"), job())
