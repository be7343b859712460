"""The CLI's habits: help on every argument, defaults shown, shell
completion, and `$schema` in a spec."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from spotline.infra.cli.parser import build
from spotline.shared.domain.spec import JobSpec, parse_spec


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"spotline": parser, **sub.choices}


def test_every_argument_of_every_command_has_help() -> None:
    missing = [
        f"{name} {action.dest}"
        for name, parser in commands().items()
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction)
        and action.dest != "help"
        and not (action.help or "").strip()
    ]
    assert missing == []


def test_help_shows_each_default() -> None:
    text = commands()["up"].format_help()
    assert "(default: 10.0)" in text and "(default: 30.0)" in text
    assert "(default: 30.0)" in commands()["preempt"].format_help()


def test_the_shell_completes_commands_and_options(tmp_path: Path) -> None:
    out = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "COMP_LINE": "spotline sta",
        "COMP_POINT": "12",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    subprocess.run(
        [sys.executable, "-m", "spotline.infra.cli.commands"], env=env, check=False, timeout=60,
        capture_output=True,
    )  # fmt: skip
    assert out.read_text().split() == ["status"]
    env.update(COMP_LINE="spotline status --li", COMP_POINT="20")
    subprocess.run(
        [sys.executable, "-m", "spotline.infra.cli.commands"], env=env, check=False, timeout=60,
        capture_output=True,
    )  # fmt: skip
    assert out.read_text().split() == ["--limit"]


def test_a_spec_may_name_its_schema_and_spotline_keeps_nothing_of_it() -> None:
    spec = {
        "$schema": "./spotline-job.schema.json",
        "user": "alice",
        "machine_ids": ["g2-standard-4"],
        "trainer": "digits_mlp",
    }
    parsed = parse_spec(json.dumps(spec).encode())
    assert "$schema" not in parsed.model_dump_json()
    assert "$schema" in JobSpec.model_json_schema()["properties"]


def test_workdir_is_taken_before_or_after_the_command() -> None:
    parser = build()
    assert parser.parse_args(["--workdir", "a", "status"]).workdir == Path("a")
    assert parser.parse_args(["status", "--workdir", "b"]).workdir == Path("b")
    assert parser.parse_args(["--workdir", "a", "status", "--workdir", "b"]).workdir == Path("b")
    assert parser.parse_args(["status"]).workdir is None  # $SPOTLINE_WORKDIR, else .spotline
    for name, command in commands().items():
        assert "--workdir" in command.format_help(), name
