"""The reaper's checks of one instance, pure: stalls, being placed, ownership."""

from __future__ import annotations

from shared.domain.liveness import being_placed, serves_its_job, stall_note, vm_being_placed
from shared.domain.states import JobStatus, JobSubstatus
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
