"""A job's timeline, phase by phase, from its documents alone (the command and its
charts: tests/emulators/test_timeline.py)."""

from __future__ import annotations

from spotline.shared.domain.documents import HistoryEntry
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobSubstatus as S
from spotline.shared.domain.timeline import Phase, phase_seconds, timeline
from spotline.shared.domain.transitions import move_job, next_attempt
from tests.documents import T0, at
from tests.emulators.test_timeline import SPEC, a_preempted_job


def test_each_attempt_shows_its_phases_and_the_total_is_a_partition() -> None:
    found = timeline(a_preempted_job().history)

    attempts = found.by_attempt()
    assert attempts[1] == {
        Phase.REQUESTING: 1,
        Phase.CONNECTING: 2,
        Phase.GEARING_UP: 1,
        Phase.SENDING: 2,
        Phase.TRAINING: 54,
        Phase.PREEMPTED: 0,
    }
    assert attempts[2][Phase.WAITING_FOR_CAPACITY] == 9
    assert attempts[2][Phase.REQUESTING] == 1 + 1  # 60-61 and 70-71
    totals = found.totals()
    # A later attempt's way back to training is recovering; waiting stays its own.
    assert totals[Phase.RECOVERING] == 2 + 2 + 1 + 1
    assert totals[Phase.WAITING_FOR_CAPACITY] == 9
    assert totals[Phase.TRAINING] == 54 + 25 and totals[Phase.RETURNING] == 2
    assert sum(totals.values()) == found.seconds == 102
    # Grouped the same way per attempt, each phase's attempts add up to its total.
    grouped = found.by_attempt(grouped=True)
    assert grouped[2] == {
        Phase.RECOVERING: 6,
        Phase.WAITING_FOR_CAPACITY: 9,
        Phase.TRAINING: 25,
        Phase.RETURNING: 2,
    }
    for phase, seconds in totals.items():
        assert sum(attempt.get(phase, 0) for attempt in grouped.values()) == seconds


def test_the_job_document_carries_the_totals_of_the_phases_that_ended() -> None:
    job = a_preempted_job()
    assert job.phase_seconds["training"] == 79
    assert job.phase_seconds["recovering"] == 6
    assert sum(job.phase_seconds.values()) == 102
    midway = new_job(JobSpec.model_validate(SPEC), "tl2", "m1", T0)
    midway = move_job(midway, S.CONNECTING_SERVER, at(1.5))
    assert midway.phase_seconds == {"requesting": 1.5}  # connecting has not ended


def test_a_skewed_vm_clock_counts_zero_never_negative_and_now_counts_the_current_phase() -> None:
    history = [
        HistoryEntry(at=at(10), status="QUEUING", substatus="CONNECTING_SERVER", attempt=1),
        HistoryEntry(at=at(8), status="QUEUING", substatus="GEARING_UP_ENV", attempt=1),
        HistoryEntry(at=at(12), status="TRAINING", substatus="TRAINING", attempt=1),
    ]
    found = timeline(history, now=at(20))
    assert found.by_attempt()[1] == {Phase.CONNECTING: 0, Phase.GEARING_UP: 4, Phase.TRAINING: 8}
    assert found.segments[-1].ongoing
    assert phase_seconds(history) == {"connecting": 0, "gearing_up": 4}


def test_installing_requirements_is_a_phase_of_its_own_and_part_of_the_way_back() -> None:
    job = new_job(JobSpec.model_validate(SPEC), "tl2", "m1", T0)
    for second, to in (
        (1, S.CONNECTING_SERVER),
        (2, S.GEARING_UP_ENV),
        (3, S.SENDING_MODEL_AND_DATA),
        (4, S.INSTALLING_REQUIREMENTS),
        (34, S.TRAINING),
    ):
        job = move_job(job, to, at(second))
    job = next_attempt(job, S.PREEMPTED, at(60), "preempted", max_attempts=5)
    for second, to in (
        (61, S.REQUESTING_SERVER),
        (62, S.CONNECTING_SERVER),
        (63, S.SENDING_MODEL_AND_DATA),
        (64, S.INSTALLING_REQUIREMENTS),
        (70, S.TRAINING),
    ):
        job = move_job(job, to, at(second))

    found = timeline(job.history)

    assert found.by_attempt()[1][Phase.INSTALLING] == 30  # not sending model and data
    assert found.by_attempt()[1][Phase.SENDING] == 1
    assert found.by_attempt()[2][Phase.INSTALLING] == 6
    # A later attempt's install is part of its way back to training.
    assert found.totals()[Phase.RECOVERING] == 70 - 60
    assert found.totals()[Phase.INSTALLING] == 30
