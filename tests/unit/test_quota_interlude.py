"""A job waiting for capacity that meets its user's instance quota on one
retry (a cooling VM of theirs holds the last slot) and no capacity again on
the next: the capacity wait goes on counting from when the attempt began to
wait, so ``wait_total_s`` still bounds it however often the two alternate.

Pure: ``spotline.shared.domain.queueing`` at times the test chooses.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.queueing import give_up_reason, waiting_for_capacity, waiting_for_quota
from spotline.shared.domain.spec import JobSpec

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
SPEC = JobSpec.model_validate(
    {
        "user": "alice",
        "machine_ids": ["g2-standard-4", "n1-standard-8-t4.od"],
        "trainer": "digits_mlp",
        "job_id": "job1",
        "wait_request_s": 60,
        "wait_total_s": 300,
    }
)


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def test_a_quota_wait_in_between_does_not_start_the_capacity_wait_again() -> None:
    job = new_job(SPEC, "job1", "m1", NOW)
    entry = waiting_for_capacity(job, None, NOW, "no capacity")
    # Every 100 s: over the instance quota once, no capacity the next time.
    for step in range(1, 6):
        entry = waiting_for_quota(job, entry, later(step * 100 - 50), "over instance quota")
        entry = waiting_for_capacity(job, entry, later(step * 100), "no capacity")
        assert entry.waiting_since == NOW, f"the wait began again at step {step}"

    why = give_up_reason(entry, SPEC, later(500))
    assert why is not None and "wait_total_s=300 s" in why
