"""Submitting jobs' "From Python" and "Shipping a local folder" examples,
copied out and run as a reader would: a script in a folder of its own,
spotline found through SPOTLINE_WORKDIR (the local stack's folder), none of
the stack's variables set."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotline.infra.localstack.stack import LocalStack
from tests.doc_examples import blocks, run_python

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

PAGE = "docs/guides/submitting.md"


def test_the_python_example_runs_on_the_local_stack(
    shared_stack: LocalStack, tmp_path: Path
) -> None:
    [example] = blocks(PAGE, "## From Python", "python")

    done = run_python(shared_stack, example, tmp_path)

    assert done.returncode == 0, done.stderr[-3000:]
    first = done.stdout.splitlines()[0].split()
    assert first[1:3] == ["COMPLETED", "2/2"] and float(first[3]) > 0.5
    assert "'training':" in done.stdout
    job_id = first[0]
    assert list((tmp_path / "runs" / job_id / "checkpoints").iterdir())
    assert list((tmp_path / "runs" / job_id / "outputs").rglob("*tfevents*"))


def test_the_code_dir_example_ships_its_folder_once(
    shared_stack: LocalStack, tmp_path: Path
) -> None:
    [example] = blocks(PAGE, "## Shipping a local folder: `--code-dir`", "python")

    done = run_python(shared_stack, example, tmp_path)

    assert done.returncode == 0, done.stderr[-3000:]
    first, second = done.stdout.splitlines()[:2]
    # train.py and .gitignore: the ignored megabyte stayed home.
    assert first.split(" ", 2)[1:] == ["COMPLETED", "[(2, 59, 2)]"], first
    assert second.split(" ", 1)[1] == "[0]", second
