"""A job driven from Python on the whole local stack: submitted, waited for,
its timeline read and charted, its logs, checkpoints, outputs and TensorBoard
logs downloaded; and a job canceled from Python."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import spotline
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.domain.timeline import Phase

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]


def test_a_job_from_python_runs_and_leaves_its_files(
    local_stack: LocalStack, repo_root: Path, tmp_path: Path
) -> None:
    spec = json.loads((repo_root / "examples" / "digits.json").read_text())

    job = spotline.submit({**spec, "epochs": 2}, workdir=local_stack.workdir)
    state = job.wait(timeout=180)

    assert (state.status, state.progress) == ("COMPLETED", "2/2"), state.error
    assert state.metrics["val_accuracy"] and state.checkpoint_uri
    totals = job.timeline().totals()
    assert totals[Phase.TRAINING] > 0 and Phase.PREEMPTED not in totals
    checkpoints = job.checkpoints(tmp_path)
    assert checkpoints and all(p.parent == tmp_path / job.id / "checkpoints" for p in checkpoints)
    outputs = job.outputs(tmp_path)
    assert any("tfevents" in p.name for p in outputs)
    assert job.tensorboard(tmp_path)[0].is_relative_to(tmp_path / "logs" / job.id)
    assert "all 2 epochs done" in job.logs()
    # Watching a job that has ended shows its end and returns at once.
    out = io.StringIO()
    assert job.watch(out=out).status == "COMPLETED"
    assert "COMPLETED/COMPLETED" in out.getvalue()
    pytest.importorskip("matplotlib")
    figure = job.plot_timeline("funnel")
    assert figure.axes[0].get_title().startswith(f"{job.id}: COMPLETED")


def test_a_job_canceled_from_python_ends_canceled(
    local_stack: LocalStack, repo_root: Path, tmp_path: Path
) -> None:
    spec = json.loads((repo_root / "examples" / "digits.json").read_text())
    job = spotline.submit({**spec, "epochs": 50}, workdir=local_stack.workdir)
    job.status()  # recorded: the cancel has a job to find

    assert job.cancel(reason="changed my mind") is True
    state = job.wait(timeout=60)

    assert (state.status, state.error) == ("CANCELED", "changed my mind")
    assert job.cancel() is False  # ended: nothing to cancel
    with pytest.raises(spotline.NothingStored):
        job.outputs(tmp_path)
