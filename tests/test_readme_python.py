"""The README's "From Python" example, copied out and run as a reader would:
a script in a folder of its own, spotline found through SPOTLINE_WORKDIR
(the local stack's folder), none of the stack's variables set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spotline.infra.localstack.stack import LocalStack

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def example() -> str:
    readme = (REPO / "README.md").read_text()
    start = readme.index("### From Python")
    end = readme.index("\n### ", start + 1)
    [code] = [body for lang, body in FENCE.findall(readme[start:end]) if lang == "python"]
    return code


def test_the_python_example_runs_on_the_local_stack(
    shared_stack: LocalStack, tmp_path: Path
) -> None:
    (tmp_path / "example.py").write_text(example())
    stacks = set(shared_stack.client_env())
    env = {name: value for name, value in os.environ.items() if name not in stacks}
    env["SPOTLINE_WORKDIR"] = str(shared_stack.workdir)

    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    first = done.stdout.splitlines()[0].split()
    assert first[1:3] == ["COMPLETED", "2/2"] and float(first[3]) > 0.5
    assert "'training':" in done.stdout
    job_id = first[0]
    assert list((tmp_path / "runs" / job_id / "checkpoints").iterdir())
    assert list((tmp_path / "runs" / job_id / "outputs").rglob("*tfevents*"))
