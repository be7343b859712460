"""The queue's rules, pure: backoff and when a waiting job gives up."""

from __future__ import annotations

from spotline.shared.domain.queueing import (
    capacity_backoff_s,
    give_up_reason,
    waiting_for_capacity,
    waiting_for_quota,
)
from spotline.shared.domain.spec import JobSpec
from tests.documents import T0, at, entry, job


def test_the_backoff_doubles_from_15_s_up_to_5_min() -> None:
    assert [capacity_backoff_s(n) for n in range(1, 8)] == [15, 30, 60, 120, 240, 300, 300]


def test_a_capacity_entry_keeps_its_start_and_counts_its_tries() -> None:
    first = waiting_for_capacity(job(), None, T0, "g2 in a: ZONE_RESOURCE_POOL_EXHAUSTED")
    assert (first.tries, first.enqueued_at, first.not_before) == (1, T0, at(15))
    second = waiting_for_capacity(job(), first, at(20), "again")
    assert (second.tries, second.enqueued_at, second.not_before) == (2, T0, at(50))
    assert second.last_error == "again" and second.reason == "no-capacity"


def test_a_quota_entry_retries_at_the_jobs_interval() -> None:
    waiting = job(spec={"wait_new_job_create_interval": 7})
    first = waiting_for_quota(waiting, None, T0, "over")
    again = waiting_for_quota(waiting, first, at(7), "still over")
    assert (again.reason, again.user, again.tries, again.enqueued_at) == ("quota", "alice", 2, T0)
    assert again.not_before == at(14)


def spec(**fields: int) -> JobSpec:
    return JobSpec.model_validate(
        {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp", **fields}
    )


def test_a_job_waiting_for_capacity_gives_up_after_a_window_per_machine_option() -> None:
    waiting = entry(tries=3, last_error="no room")
    assert give_up_reason(waiting, spec(wait_request_s=60), at(59)) is None
    reason = give_up_reason(waiting, spec(wait_request_s=60), at(60))
    assert reason == (
        "no capacity within wait_request_s=60 s per machine option x 1 = 60 s: "
        "asked for g2-standard-4; 3 tries, last: no room"
    )
    # Every reason but quota waits for capacity (a preempted job's next attempt too).
    assert give_up_reason(entry(reason="preempted"), spec(wait_request_s=60), at(61))


def test_the_windows_and_the_deadline_count_from_when_the_attempt_began_to_wait() -> None:
    two = JobSpec.model_validate(
        {
            "user": "alice",
            "machine_ids": ["g2-standard-4", "n1-standard-8-t4"],
            "trainer": "digits_mlp",
            "wait_request_s": 60,
        }
    )
    waiting = entry(enqueued_at=T0, waiting_since=at(100), last_error="full")
    assert give_up_reason(waiting, two, at(219)) is None
    reason = give_up_reason(waiting, two, at(220))
    assert reason is not None and "asked for g2-standard-4, n1-standard-8-t4;" in reason
    forever = two.model_copy(update={"wait_total_s": 0})
    assert give_up_reason(waiting, forever, at(10**6)) is None


def test_a_capacity_entry_is_due_at_its_windows_end_and_a_new_attempt_starts_anew() -> None:
    waiting = job(spec={"machine_ids": ["g2-standard-4", "n1-standard-8-t4"], "wait_request_s": 40})
    first = waiting_for_capacity(waiting, None, T0, "full")
    assert (first.waiting_since, first.not_before) == (T0, at(15))
    second = waiting_for_capacity(waiting, first, at(15), "full")
    assert (second.waiting_since, second.not_before) == (T0, at(40))  # not at(45)
    last = waiting_for_capacity(waiting, second.model_copy(update={"tries": 9}), at(70), "full")
    assert last.not_before == at(80)  # the wait's end: 2 options x 40 s
    next_attempt = waiting.model_copy(update={"attempt": 2})
    again = waiting_for_capacity(next_attempt, second, at(500), "full")
    assert (again.waiting_since, again.not_before) == (at(500), at(515))  # quick again


def test_a_job_waiting_for_quota_gives_up_after_wait_new_job_create_s_if_positive() -> None:
    waiting = entry(reason="quota", last_error="old reason")
    assert give_up_reason(waiting, spec(wait_new_job_create_s=30), at(30)) is None
    reason = give_up_reason(waiting, spec(wait_new_job_create_s=30), at(31), last_error="5 jobs")
    assert reason == "over quota for wait_new_job_create_s=30 s: 5 jobs"
    for forever in (0, -1):
        assert give_up_reason(waiting, spec(wait_new_job_create_s=forever), at(10**6)) is None


def test_the_backoff_starts_again_with_each_options_window() -> None:
    waiting = job(
        spec={"machine_ids": ["g2-standard-4", "n1-standard-8-t4"], "wait_request_s": 300}
    )
    tired = entry(tries=4, waiting_since=T0)  # the first option, asked for 4 times
    switched = waiting_for_capacity(waiting, tired, at(300), "full")
    assert switched.not_before == at(315)  # not 240 s on: the second option's quick cadence
    again = waiting_for_capacity(waiting, switched, at(315), "full")
    assert (again.tries, again.not_before) == (6, at(345))
