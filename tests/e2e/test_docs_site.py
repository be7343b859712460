"""The documentation site: it builds with ``mkdocs build --strict`` (a broken
link or a missing page fails), its reference pages carry every field, command,
setting and event the code declares, and its examples are the tested ones."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.parser import build
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.contract import events
from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.spec import JobSpec, parse_spec
from spotline.shared.settings import Settings
from tests.doc_examples import blocks, page_blocks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GETTING_STARTED = "docs/getting-started.md"


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


def test_the_readme_shows_getting_started_s_commands_and_examples() -> None:
    """The README's blocks are getting started's, which the tests run: the two
    commands (CI runs them: .ci/run, make test) and the three ways to submit."""
    [two_commands] = blocks("README.md", "## Quick start", "sh")
    assert blocks(GETTING_STARTED, "## The local stack in two commands", "sh") == [two_commands]
    for lang in ("sh", "python"):
        shown = blocks("README.md", "## One job, three ways", lang)
        assert shown == blocks(GETTING_STARTED, "## Your own job, three ways", lang), lang


@pytest.mark.parametrize(
    ("page", "heading"),
    [("README.md", "## One job, three ways"), ("docs/guides/submitting.md", "# Submitting jobs")],
)
def test_the_job_shown_is_examples_digits_json(page: str, heading: str) -> None:
    [shown, *_] = blocks(page, heading, "json")
    assert json.loads(shown) == json.loads((ROOT / "examples" / "digits.json").read_text())


def test_every_job_spec_shown_is_one_spotline_accepts() -> None:
    """A JSON block with ``machine_ids`` on any page is a job spec a reader
    may copy: it must pass the submit function's validation."""
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    specs = [
        (page.relative_to(ROOT), block)
        for page in pages
        for block in page_blocks(str(page.relative_to(ROOT)), "json")
        if '"machine_ids"' in block
    ]
    for page, block in specs:
        try:
            parse_spec(block.encode())
        except InvalidMessage as err:
            pytest.fail(f"{page} shows a job spec spotline refuses: {err}\n{block}")
    assert len(specs) >= 12, specs  # as many as the pages showed when this was written


def test_the_readme_is_a_front_page_whose_links_resolve() -> None:
    """The README stays a front page (the guides live in docs/), and each
    file it links to exists: mkdocs checks the site's links, not the README's."""
    readme = (ROOT / "README.md").read_text()
    assert readme.count("\n") <= 200
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert targets
    missing = [target for target in targets if not (ROOT / target).is_file()]
    assert not missing, f"the README links to files that do not exist: {missing}"


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
