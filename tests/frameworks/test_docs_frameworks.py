"""The Hugging Face, Lightning and PyTorch pages: each shows
its example file as it is (the stack tests, tests/e2e/test_e2e_frameworks.py, run
the first two as preempted jobs), its job spec is valid, and the plain
PyTorch loop, sent SIGTERM mid-epoch, saves that step and then ends with the
weights of a run never stopped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from spotline.shared.domain.spec import parse_spec
from tests.doc_examples import blocks
from tests.script_runs import SCRIPT_TIMEOUT_S, events, run, script_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECTIONS = {
    ("docs/frameworks/hugging-face.md", "## A Hugging Face Trainer script"): "hf_job",
    ("docs/frameworks/lightning.md", "## A Lightning script"): "lightning_job",
    ("docs/frameworks/pytorch.md", "## A plain PyTorch script"): "torch_job",
}
HF = ("docs/frameworks/hugging-face.md", "## A Hugging Face Trainer script")
TORCH_SCRIPT = EXAMPLES / "torch_job" / "train.py"


@pytest.mark.parametrize("where", list(SECTIONS), ids=lambda where: where[0])
def test_each_section_shows_its_example_as_it_is(where: tuple[str, str]) -> None:
    [script] = blocks(*where, "python")
    assert script == (EXAMPLES / SECTIONS[where] / "train.py").read_text()


def test_the_hugging_face_job_spec_is_valid() -> None:
    [spec] = [parse_spec(block.encode()) for block in blocks(*HF, "json")]
    assert spec.command == ["python", "train.py"] and spec.env["HF_HUB_OFFLINE"] == "1"


@pytest.mark.frameworks
def test_the_plain_pytorch_loop_saves_the_step_of_the_notice_and_loses_nothing(
    tmp_path: Path,
) -> None:
    reference = tmp_path / "reference"
    reference.mkdir()
    env = {**script_env(reference, integrated=True), "SPOTLINE_EPOCHS": "12"}
    (reference / "outputs").mkdir()
    done = run(TORCH_SCRIPT, env)
    assert done.returncode == 0, done.stderr[-3000:]

    stopped = tmp_path / "stopped"
    stopped.mkdir()
    env = {**script_env(stopped, integrated=True), "SPOTLINE_EPOCHS": "12"}
    (stopped / "outputs").mkdir()
    with subprocess.Popen([sys.executable, str(TORCH_SCRIPT)], env=env) as process:
        deadline = time.monotonic() + SCRIPT_TIMEOUT_S
        while not [e for e in events(stopped) if e["type"] == "epoch"]:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)  # in the second epoch, or soon after
        assert process.wait(timeout=SCRIPT_TIMEOUT_S) == 143
    [notice] = [e for e in events(stopped) if e["type"] == "checkpoint"]
    assert notice["reason"] == "sigterm" and notice["uri"].endswith(
        f"ckpt-{notice['step']:012d}.pt"
    )

    resumed = run(TORCH_SCRIPT, env)

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [start] = [e for e in events(stopped) if e["type"] == "resumed"]
    assert start["step"] == notice["step"]  # no step done twice
    reports = [json.dumps(e) for e in events(stopped) if e["type"] == "epoch"]
    assert len(reports) == 12, reports
    final = torch.load(stopped / "outputs" / "digits.pt")
    for name, tensor in torch.load(reference / "outputs" / "digits.pt").items():
        assert_close(final[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
