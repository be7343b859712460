"""The trainer contract (Writing your own trainer) and the framework pages,
copied out and run as a reader would: their job specs are valid, the shell
report line is one the agent reads, and the Keras script is the example the
stack test preempts and runs with plain ``python train.py`` outside spotline
(that one needs the ``tensorflow`` extra: ``make tensorflow``; without it, it
skips loudly)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotline.shared.domain.spec import parse_spec
from tests.doc_examples import ROOT as REPO
from tests.doc_examples import blocks, page_blocks

# The pages the README's trainer section became: their specs are checked.
TRAINER_PAGES = [
    "docs/guides/trainer.md",
    "docs/frameworks/keras.md",
    "docs/frameworks/hugging-face.md",
    "docs/frameworks/lightning.md",
    "docs/frameworks/pytorch.md",
    "docs/guides/data-and-dependencies.md",
]
KERAS_SCRIPT = ("docs/frameworks/keras.md", "## A Keras script")


def test_the_job_specs_are_valid() -> None:
    specs = [
        parse_spec(block.encode()) for page in TRAINER_PAGES for block in page_blocks(page, "json")
    ]
    assert len(specs) >= 2
    assert {spec.code_uri.split(":", 1)[0] for spec in specs if spec.code_uri} == {"gs", "file"}


def test_the_shell_report_is_a_line_the_agent_reads(tmp_path: Path) -> None:
    [shell] = blocks("docs/guides/trainer.md", "# Writing your own trainer", "sh")
    events = tmp_path / "events.jsonl"
    env = {**os.environ, "SPOTLINE_EVENTS": str(events)}
    subprocess.run(["bash", "-c", shell], env=env, check=True)
    [record] = [json.loads(line) for line in events.read_text().splitlines()]
    assert record["type"] == "epoch" and record["epoch"] == 3


def test_the_keras_script_is_the_example_the_stack_test_runs() -> None:
    [script] = [block for block in blocks(*KERAS_SCRIPT, "python") if "spotline_callbacks" in block]
    assert script == (REPO / "examples" / "keras_job" / "train.py").read_text()


@pytest.mark.frameworks
@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None,
    reason="!!! DOCS KERAS SCRIPT NOT RUN: TensorFlow is not installed (make tensorflow) !!!",
)
def test_the_keras_script_runs_on_its_own(tmp_path: Path) -> None:
    [script] = [block for block in blocks(*KERAS_SCRIPT, "python") if "spotline_callbacks" in block]
    (tmp_path / "train.py").write_text(script)
    # A reader's shell: no spotline variables; spotline importable as installed.
    env = {name: value for name, value in os.environ.items() if not name.startswith("SPOTLINE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("not on a spotline VM") == 1
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["epoch"] for r in reports if r["type"] == "epoch"] == [1, 2, 3]
    history = json.loads((tmp_path / "history.json").read_text())
    assert history["epoch"] == [0, 1, 2]
    assert history["history"]["val_accuracy"][-1] > 0.8
