"""How the CLI fails where no project is read: a corrupt stack file, an unexpected
error, the documented exit codes (against a deployment:
tests/emulators/test_cli_failures.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from spotline.infra.cli import failures
from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.exit_codes import Exit
from spotline.infra.localstack.stack import STACK_FILE
from tests.doc_examples import section


def test_an_unexpected_error_is_one_line_pointing_at_traceback() -> None:
    code, message = failures.describe(KeyError("attempts"))

    assert code == Exit.SOFTWARE
    assert message.splitlines() == [message]
    assert "KeyError" in message and "--traceback" in message


def test_a_corrupt_stack_file_is_named_with_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stack file cut short (the disk filled while `spotline up` wrote it)."""
    (tmp_path / STACK_FILE).write_text('{"env": {"FIRESTORE_EMU')
    names = [name for name in os.environ if name.endswith("_EMULATOR_HOST")]
    saved = {name: os.environ.pop(name) for name in names}
    try:
        assert cli(["--workdir", str(tmp_path), "status"]) == Exit.NOT_CONNECTED
    finally:
        os.environ.update(saved)
    [line] = capsys.readouterr().err.strip().splitlines()
    assert str(tmp_path / STACK_FILE) in line and "spotline up" in line


def test_the_cli_reference_documents_every_exit_code() -> None:
    table = section("docs/reference/cli.md", "## When a command fails: one line and an exit code")
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    assert documented == {int(code) for code in Exit}
