"""The line that says a job saved nothing, as the handlers write it (shown by watch
and the dashboard: tests/emulators/test_nothing_saved.py)."""

from __future__ import annotations

from spotline.shared.domain.nothing_saved import after_finish, after_preemption
from tests.emulators.test_nothing_saved import a_job, completed, finished, notice


def test_messages_of_an_agent_before_the_mirror_still_validate_and_are_not_judged() -> None:
    old = notice()
    assert old.mirrored_checkpoints is None
    assert finished().mirrored_checkpoints is None and finished().mirrored_outputs is None
    assert after_preemption(a_job(), old).nothing_saved is None
    assert after_finish(completed(), finished()).nothing_saved is None


def test_a_preemption_with_nothing_saved_says_what_to_do() -> None:
    job = after_preemption(a_job(), notice(mirrored_checkpoints=0))

    assert job.nothing_saved is not None
    assert job.nothing_saved.startswith("preempted with nothing saved, so it starts over")
    assert "$SPOTLINE_CHECKPOINT_DIR" in job.nothing_saved and "\n" not in job.nothing_saved
    # Something saved since: the line goes.
    assert after_preemption(job, notice(mirrored_checkpoints=2)).nothing_saved is None
    assert after_preemption(job, notice(mirrored_checkpoints=0, step=40)).nothing_saved is None


def test_a_completion_without_a_checkpoint_or_an_output_says_so() -> None:
    nothing = finished(mirrored_checkpoints=0, mirrored_outputs=0)

    line = after_finish(completed(), nothing).nothing_saved

    assert line is not None and line.startswith("completed without saving")
    assert "$SPOTLINE_OUTPUT_DIR" in line
    output = finished(mirrored_checkpoints=0, mirrored_outputs=1)
    assert after_finish(completed(), output).nothing_saved is None
    reported = completed().model_copy(update={"checkpoint_uri": "gs://b/j/ckpt-1.pt"})
    assert after_finish(reported, nothing).nothing_saved is None
    # A failed run is not a completion.
    failed = finished(exit_code=1, mirrored_checkpoints=0, mirrored_outputs=0)
    assert after_finish(a_job(), failed).nothing_saved is None
