"""A Hugging Face Trainer script, as its documentation writes it, sent SIGTERM
(the preemption notice) between two of its saves, then run again.

With ``spotline.transformers`` it saves at the step it stopped at, exits 143,
and the next run redoes no step and ends with the weights of a run never
stopped. Without it, the same script loses what it did since its last save.
Needs the ``hf`` extra (``make hf``; CI installs it); skips loudly without.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.framework_required import require_modules
from tests.script_runs import (
    assert_a_notice_on_an_epochs_last_step_reports_it_once,
    assert_rerun_redoes_what_followed_the_last_save,
    assert_resumed_redoing_none,
    assert_same_weights,
    events,
    run,
    run_until_sigterm,
    script_env,
    steps_done,
)

require_modules(("transformers", "accelerate"), "HUGGING FACE TRAINER TESTS", "hf")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

pytestmark = pytest.mark.frameworks

SCRIPT = Path(__file__).parents[1].joinpath("hf_script.py")
STEPS = 48  # 2 epochs of 24 steps
SAVE_STEPS = 10
STOP_AT = 33  # in the second epoch, between the saves at 30 and 40


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    folder = tmp_path_factory.mktemp("uninterrupted")
    done = run(SCRIPT, script_env(folder, integrated=True))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert steps_done(folder / "steps.txt") == list(range(1, STEPS + 1))
    return load_file(folder / "outputs" / "model.safetensors")


def test_the_notice_saves_at_the_step_and_the_next_run_redoes_none(
    tmp_path: Path, uninterrupted: dict[str, torch.Tensor]
) -> None:
    stopped = run_until_sigterm(
        SCRIPT, script_env(tmp_path, integrated=True, step_sleep_s=0.3), STOP_AT
    )

    assert stopped.returncode == 143, stopped.stdout[-3000:]
    stopped_at = steps_done(tmp_path / "steps.txt")[-1]
    assert STOP_AT <= stopped_at < STEPS and stopped_at % SAVE_STEPS != 0
    saved = sorted(path.name for path in (tmp_path / "checkpoints").iterdir())
    assert f"checkpoint-{stopped_at}" in saved, saved
    [notice] = [e for e in events(tmp_path) if e["type"] == "checkpoint"]
    assert notice["step"] == stopped_at and notice["reason"] == "sigterm"
    assert notice["uri"].endswith(f"checkpoints/checkpoint-{stopped_at}")
    assert [e["epoch"] for e in events(tmp_path) if e["type"] == "epoch"] == [1]

    assert_resumed_redoing_none(SCRIPT, tmp_path, stopped_at, STEPS, "loss")
    assert_same_weights(load_file(tmp_path / "outputs" / "model.safetensors"), uninterrupted)


def test_without_the_callback_the_script_loses_at_most_its_save_interval(
    tmp_path: Path,
) -> None:
    stopped = run_until_sigterm(
        SCRIPT, script_env(tmp_path, integrated=False, step_sleep_s=0.3), STOP_AT
    )

    assert stopped.returncode == -15  # SIGTERM's default action: no save
    assert_rerun_redoes_what_followed_the_last_save(SCRIPT, tmp_path, STEPS, SAVE_STEPS)


def test_last_checkpoint_is_none_before_the_first_save(tmp_path: Path) -> None:
    from spotline.transformers import last_checkpoint

    assert last_checkpoint(tmp_path / "missing") is None  # a first attempt
    assert last_checkpoint(tmp_path) is None
    (tmp_path / "checkpoint-9").mkdir()
    (tmp_path / "checkpoint-10").mkdir()
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")


def test_a_notice_on_the_last_step_of_an_epoch_still_reports_that_epoch_once(
    tmp_path: Path,
) -> None:
    assert_a_notice_on_an_epochs_last_step_reports_it_once(SCRIPT, tmp_path, STEPS)
