"""The documentation site: it builds with ``mkdocs build --strict`` (a broken
link or a missing page fails), its reference pages carry every field, command,
setting and event the code declares, and its examples are the tested ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.parser import build
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.contract import events
from spotline.shared.domain.spec import JobSpec
from spotline.shared.settings import Settings
from tests.readme_examples import blocks

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("material", reason="mkdocs-material is in the dev extra")
    target = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return target


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text()


def test_the_job_spec_page_has_every_field(site: Path) -> None:
    shown = page(site, "reference/job-spec")
    missing = [
        field.alias or name
        for name, field in JobSpec.model_fields.items()
        if f"<code>{field.alias or name}</code>" not in shown
    ]
    assert not missing


def test_the_cli_page_has_every_command_and_option(site: Path) -> None:
    shown = page(site, "reference/cli")
    parser = build()
    assert parser._subparsers is not None
    [commands] = [action for action in parser._subparsers._group_actions]
    for name, command in commands.choices.items():  # type: ignore[union-attr]
        assert f"spotline {name}" in shown, name
        for action in command._actions:
            for flag in action.option_strings:
                assert flag in shown, f"{name} {flag}"


def test_the_settings_page_has_every_setting(site: Path) -> None:
    shown = page(site, "reference/settings")
    assert all(f"<code>{name}</code>" in shown for name in Settings.model_fields)


def test_the_events_page_has_every_message(site: Path) -> None:
    shown = page(site, "reference/events")
    for name in ("VmBooted", "Heartbeat", "EpochDone", "JobFinished", "SpotPreempted"):
        assert f"<code>{name}</code>" in shown
        assert hasattr(events, name)


def test_getting_started_runs_the_readme_quick_start() -> None:
    """The two commands are the README's, which CI runs (.ci/run: make test)."""
    started = (DOCS / "getting-started.md").read_text()
    [two_commands, *_] = blocks("## Quick start", "sh")
    assert f"```sh\n{two_commands}```" in started


@pytest.mark.e2e
def test_getting_started_submits_the_demo_job_and_follows_it(
    local_stack: LocalStack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started = (DOCS / "getting-started.md").read_text()
    line = next(line for line in started.splitlines() if "spotline submit" in line)
    argv = line.split("#")[0].split()[1:]  # .venv/bin/spotline submit FILE --follow
    monkeypatch.chdir(ROOT)
    assert cli(["--workdir", str(local_stack.workdir), *argv]) == 0
    assert "COMPLETED" in capsys.readouterr().out
