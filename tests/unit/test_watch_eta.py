"""spotline watch's estimate of the time left (the command: tests/emulators/test_watch.py)."""

from __future__ import annotations

from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.progress import eta_s
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobSubstatus as S
from spotline.shared.domain.transitions import move_job
from tests.documents import T0, at
from tests.emulators.test_watch import SPEC, epoch


def test_the_eta_is_the_current_attempts_pace_times_the_epochs_left() -> None:
    job = new_job(JobSpec.model_validate(SPEC), "w1", "m1", T0)
    job = move_job(move_job(job, S.CONNECTING_SERVER, at(5)), S.TRAINING, at(10))
    assert eta_s(job, [], at(12)) is None  # no epoch yet: no pace
    job = job.model_copy(update={"epoch": 1})
    # 20 s for the first epoch; two left, 5 s into the second: 35 s.
    assert eta_s(job, [epoch(1, 30)], at(35)) == 35
    done = job.model_copy(update={"epoch": 3})
    assert eta_s(done, [epoch(1, 30)], at(35)) == 0
