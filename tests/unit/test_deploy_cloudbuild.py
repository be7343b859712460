"""cloudbuild.yaml: lint, test, the image, then deploy, each step a script that
exists in the repo (Cloud Build would fail on the missing one only at that step,
after an hour of the others)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from spotline.infra.cli.commands import _parser as build_parser

ROOT = Path(__file__).resolve().parents[2]
STEP = re.compile(r"^  - id: (?P<id>\S+)\n(?P<body>(?:    .*\n|\n)*)", re.MULTILINE)


def steps() -> dict[str, str]:
    """Each step's id and its indented body, in order."""
    text = (ROOT / "cloudbuild.yaml").read_text()
    return {m.group("id"): m.group("body") for m in STEP.finditer(text)}


def script_of(body: str) -> Path:
    [args] = re.findall(r"^    args: \[(.*)\]$", body, re.MULTILINE)
    return ROOT / args.split(",")[0].strip()


def test_the_build_lints_tests_bakes_the_image_then_deploys() -> None:
    assert list(steps()) == ["lint", "test", "wheel", "image", "deploy"]


def test_every_step_calls_a_script_that_exists_and_runs() -> None:
    for step, body in steps().items():
        script = script_of(body)
        assert script.is_file(), f"{step}: {script} is not in the repo"
        assert os.access(script, os.X_OK), f"{step}: {script} is not executable"
        first = script.read_text().splitlines()[0]
        assert first in ("#!/bin/bash", "#!/bin/sh"), f"{step}: {first}"
        shell = first.removeprefix("#!")
        checked = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True)
        assert checked.returncode == 0, f"{step}: {checked.stderr}"


def test_the_deploy_step_runs_spotline_deploy_with_flags_it_takes() -> None:
    script = script_of(steps()["deploy"]).read_text()
    [command] = re.findall(r"spotline deploy \\\n(.*)", script)
    flags = [word for word in shlex.split(command) if word.startswith("--")]
    assert flags == ["--project", "--region", "--storage-root"]
    args = build_parser().parse_args(
        ["deploy", "--project", "p", "--region", "us-central1", "--storage-root", "gs://b/r"]
    )
    assert args.project == "p"


def test_the_make_targets_the_scripts_call_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for step in ("lint", "test"):
        for target in re.findall(r"^make (\w+)", script_of(steps()[step]).read_text(), re.M):
            assert re.search(rf"^{target}:", makefile, re.MULTILINE), target
