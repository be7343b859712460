"""A Lightning script, as its documentation writes it, sent SIGTERM (the
preemption notice) between two of its saves, then run again.

With ``spotline.lightning`` it saves at the step it stopped at, exits 143, and
the next run redoes no step and ends with the weights of a run never stopped.
Without it, Lightning's own SIGTERM handling stops at the step and exits 0
with nothing saved: the script loses what it did since its last save.
Needs the ``lightning`` extra (``make lightning``; CI installs it); skips
loudly without.
"""

from __future__ import annotations

import os
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

require_modules(("lightning", "torchdata"), "LIGHTNING TESTS", "lightning")

import torch  # noqa: E402

pytestmark = pytest.mark.frameworks

SCRIPT = Path(__file__).parents[1].joinpath("lightning_script.py")
STEPS = 48  # 2 epochs of 24 steps
SAVE_STEPS = 10
STOP_AT = 33  # in the second epoch, between the saves at 30 and 40


def weights(folder: Path) -> dict[str, torch.Tensor]:
    loaded: dict[str, torch.Tensor] = torch.load(folder / "outputs" / "model.pt")
    return loaded


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    folder = tmp_path_factory.mktemp("uninterrupted")
    done = run(SCRIPT, script_env(folder, integrated=True))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert steps_done(folder / "steps.txt") == list(range(1, STEPS + 1))
    return weights(folder)


def test_the_notice_saves_at_the_step_and_the_next_run_redoes_none(
    tmp_path: Path, uninterrupted: dict[str, torch.Tensor]
) -> None:
    stopped = run_until_sigterm(
        SCRIPT, script_env(tmp_path, integrated=True, step_sleep_s=0.3), STOP_AT
    )

    assert stopped.returncode == 143, stopped.stdout[-3000:]
    stopped_at = steps_done(tmp_path / "steps.txt")[-1]
    assert STOP_AT <= stopped_at < STEPS and stopped_at % SAVE_STEPS != 0
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == stopped_at
    [notice] = [e for e in events(tmp_path) if e["type"] == "checkpoint"]
    assert notice["step"] == stopped_at and notice["reason"] == "sigterm"
    assert notice["uri"] == str(last)
    assert [e["epoch"] for e in events(tmp_path) if e["type"] == "epoch"] == [1]

    assert_resumed_redoing_none(SCRIPT, tmp_path, stopped_at, STEPS, "train_loss")
    assert_same_weights(weights(tmp_path), uninterrupted)


def test_without_the_callback_the_script_loses_at_most_its_save_interval(
    tmp_path: Path,
) -> None:
    stopped = run_until_sigterm(
        SCRIPT, script_env(tmp_path, integrated=False, step_sleep_s=0.3), STOP_AT
    )

    # Lightning stops at the step on SIGTERM, saves nothing, and exits 0.
    assert stopped.returncode == 0, stopped.stdout[-3000:]
    assert_rerun_redoes_what_followed_the_last_save(SCRIPT, tmp_path, STEPS, SAVE_STEPS)


def test_last_checkpoint_goes_by_steps_not_by_file_times(tmp_path: Path) -> None:
    from spotline.lightning import last_checkpoint

    assert last_checkpoint(tmp_path / "missing") is None  # a first attempt
    assert last_checkpoint(tmp_path) is None
    torch.save({"global_step": 33}, tmp_path / "last.ckpt")  # the notice's save
    torch.save({"global_step": 30}, tmp_path / "epoch=1-step=30.ckpt")
    (tmp_path / "cut-short.ckpt").write_bytes(b"PK\x03\x04 not a whole file")
    # Restored on a new VM: the times are the copy's, in any order.
    os.utime(tmp_path / "last.ckpt", (1, 1))

    assert last_checkpoint(tmp_path) == str(tmp_path / "last.ckpt")

    torch.save({"global_step": 40}, tmp_path / "epoch=1-step=40.ckpt")
    assert last_checkpoint(tmp_path) == str(tmp_path / "epoch=1-step=40.ckpt")


def test_a_notice_on_the_last_step_of_an_epoch_still_reports_that_epoch_once(
    tmp_path: Path,
) -> None:
    # Lightning itself ends the epoch before it stops on a SIGTERM that comes
    # in the epoch's last step (training_epoch_loop: "defer exit to the parent").
    assert_a_notice_on_an_epochs_last_step_reports_it_once(SCRIPT, tmp_path, STEPS)
