from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.shared.contract.events import EpochDone, Heartbeat, JobFinished, VmBooted
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import (
    StaleEvent,
    booted,
    epoch_done,
    finished,
    heartbeat,
    new_job,
    vm_lost,
    vm_recorded,
)
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.transitions import move_job

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
S = JobSubstatus


def placed() -> JobDoc:
    spec = JobSpec(user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp", epochs=4)
    job = new_job(spec, "job1", "m1", T0)
    job = move_job(job, S.CONNECTING_SERVER, T0)
    return job.model_copy(update={"instance": "vm-1"})


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


COMMON: dict[str, Any] = {"job_id": "job1", "attempt": 1, "instance": "vm-1"}
PHASES = {S.GEARING_UP_ENV: at(1), S.SENDING_MODEL_AND_DATA: at(2), S.TRAINING: at(3)}


def test_whichever_event_comes_first_fills_in_the_timeline_with_vm_times() -> None:
    beat = Heartbeat(**COMMON, sent_at=at(3), phase=S.TRAINING, phases=PHASES)
    job = heartbeat(placed(), beat, now=at(5))
    assert [(h.substatus, h.at) for h in job.history[2:]] == [
        (S.GEARING_UP_ENV, at(1)),
        (S.SENDING_MODEL_AND_DATA, at(2)),
        (S.TRAINING, at(3)),
    ]
    late_boot = VmBooted(**COMMON, sent_at=at(1), phases={S.GEARING_UP_ENV: at(1)})
    assert booted(job, late_boot, now=at(6)) == job


def test_epochs_only_move_forward() -> None:
    job = placed()
    for epoch in (1, 2, 2, 1):
        event = EpochDone(
            **COMMON,
            sent_at=at(10),
            epoch=epoch,
            epochs=4,
            step=epoch * 10,
            metrics={"loss": 1 / epoch},
        )
        job = epoch_done(job, event, now=at(10 + epoch))
    assert (job.epoch, job.progress, job.step, job.metrics) == (2, "2/4", 20, {"loss": 0.5})
    assert job.status == JobStatus.TRAINING


def test_events_of_another_attempt_are_stale() -> None:
    event = VmBooted(job_id="job1", attempt=2, instance="vm-2", sent_at=T0)
    with pytest.raises(StaleEvent, match="attempt 2"):
        booted(placed(), event, now=T0)


def test_finishing_from_any_step() -> None:
    done = finished(placed(), JobFinished(**COMMON, sent_at=at(9), exit_code=0), now=at(9))
    assert done.status == JobStatus.COMPLETED
    assert finished(done, JobFinished(**COMMON, sent_at=at(9), exit_code=1), now=at(10)) == done


def test_a_job_with_two_preemptions_costs_the_sum_of_its_pieces() -> None:
    spec = JobSpec(user="alice", machine_ids=["g2-standard-4"], trainer="digits_mlp")
    job = new_job(spec, "job1", "m1", T0)
    pieces = [(0, 600, 0.28), (700, 2500, 0.28), (2600, 4000, 0.71)]  # start, end, $/h
    for attempt, (start, end, price) in enumerate(pieces, start=1):
        instance = f"vm-{attempt}"
        job = vm_recorded(job, instance, "z", "g2-standard-4", at(start), price, 0.71)
        if attempt < len(pieces):
            job = vm_lost(job, instance, attempt, S.PREEMPTED, at(end), "preempted")
        else:
            done = JobFinished(
                job_id="job1",
                attempt=attempt,
                instance=instance,
                sent_at=at(end),
                exit_code=0,
                phases={S.TRAINING: at(start + 1)},
            )
            job = finished(job, done, at(end))
    expected = sum((end - start) / 3600 * price for start, end, price in pieces)
    assert job.status == JobStatus.COMPLETED and job.preemptions == 2
    assert job.cost_usd == pytest.approx(expected, abs=1e-5)
    assert [a.cost_usd for a in job.attempts] == pytest.approx(
        [(e - s) / 3600 * p for s, e, p in pieces], abs=1e-5
    )
    assert job.on_demand_cost_usd == pytest.approx(3800 / 3600 * 0.71, abs=1e-5)
    assert job.savings_percent == pytest.approx(
        100 * (1 - expected / (3800 / 3600 * 0.71)), abs=0.1
    )
