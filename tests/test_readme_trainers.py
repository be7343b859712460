"""The README's "Writing your own trainer" section, copied out and run as a
reader would: its job specs are valid, its shell report line is one the agent
reads, and its Keras script is the example the stack test preempts and runs
with plain ``python train.py`` outside spotline (that one needs the
``tensorflow`` extra: ``make tensorflow``; without it, it skips loudly)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spotline.shared.domain.spec import parse_spec

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def section_blocks(language: str) -> list[str]:
    """The fenced ``language`` blocks of the README's trainer section."""
    readme = (REPO / "README.md").read_text()
    start = readme.index("### Writing your own trainer")
    end = readme.index("\n## ", start)
    return [body for lang, body in FENCE.findall(readme[start:end]) if lang == language]


def test_the_job_specs_are_valid() -> None:
    specs = [parse_spec(block.encode()) for block in section_blocks("json")]
    assert len(specs) >= 2
    assert {spec.code_uri.split(":", 1)[0] for spec in specs if spec.code_uri} == {"gs", "file"}


def test_the_shell_report_is_a_line_the_agent_reads(tmp_path: Path) -> None:
    [shell] = section_blocks("sh")
    events = tmp_path / "events.jsonl"
    env = {**os.environ, "SPOTLINE_EVENTS": str(events)}
    subprocess.run(["bash", "-c", shell], env=env, check=True)
    [record] = [json.loads(line) for line in events.read_text().splitlines()]
    assert record["type"] == "epoch" and record["epoch"] == 3


def test_the_keras_script_is_the_example_the_stack_test_runs() -> None:
    [script] = [block for block in section_blocks("python") if "spotline_callbacks" in block]
    assert script == (REPO / "examples" / "keras_job" / "train.py").read_text()


@pytest.mark.frameworks
@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None,
    reason="!!! README KERAS SCRIPT NOT RUN: TensorFlow is not installed (make tensorflow) !!!",
)
def test_the_keras_script_runs_on_its_own(tmp_path: Path) -> None:
    [script] = [block for block in section_blocks("python") if "spotline_callbacks" in block]
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
