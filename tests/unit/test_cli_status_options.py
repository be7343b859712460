"""spotline status and submit where no project is read: a narrow terminal, options
that exclude each other (against a project: tests/emulators/test_cli_status.py)."""

from __future__ import annotations

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.exit_codes import Exit
from spotline.infra.cli.jobs_table import fitted
from tests.documents import job
from tests.emulators.test_cli_status import NOW


def test_a_narrow_terminal_still_gets_the_job_and_its_status() -> None:
    long = job("a-job-id-longer-than-the-terminal-is-wide")
    for width in (20, 40):
        columns, description = fitted([long], NOW, width)
        assert [c.header for c in columns] == ["JOB", "STATUS"] and description == 0


def test_submit_json_and_follow_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli(["submit", "job.json", "--json", "--follow"])
    assert ended.value.code == Exit.USAGE
    assert "not allowed with argument" in capsys.readouterr().err
