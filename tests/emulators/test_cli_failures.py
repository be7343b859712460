"""One way the CLI fails: every command, against a deployed project with no
credentials on the machine and against jobs that do not exist or have ended,
prints one line of error and exits with a documented code, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.exit_codes import Exit
from spotline.infra.client.errors import JobNotFound
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.documents import job

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "infra" / "cli" / "digits.json"

# Every command that reads or changes the deployment (`settings` and `schema`
# need no credentials; `up`, `demo` and `preempt` are local).
NEEDS_THE_PROJECT = [
    ["status"],
    ["status", "j-1"],
    ["cancel", "j-1"],
    ["logs", "j-1"],
    ["timeline", "j-1"],
    ["watch", "j-1"],
    ["rejected"],
    ["machines"],
    ["submit", str(DIGITS)],
    ["checkpoints", "j-1", "out"],
    ["tensorboard", "j-1", "out"],
    ["replay", "j-1"],
    ["deploy"],
    ["deploy", "--dry-run"],
    ["destroy", "--yes"],
    ["destroy", "--dry-run"],
]


@pytest.fixture
def no_credentials(tmp_path: Path) -> dict[str, str]:
    """A machine where `spotline deploy` left its config file, and no Google
    credentials: no ADC file, an empty gcloud config, and the metadata server
    (which google.auth asks last) a closed port on this machine."""
    home = tmp_path / "home"
    config = home / ".config" / "spotline" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(
        json.dumps(
            {
                "project": "demo-proj",
                "region": "us-central1",
                "zones": ["us-central1-a"],
                "storage_root": "gs://demo-proj-spotline",
            }
        )
    )
    (tmp_path / "gcloud").mkdir()
    closed = "127.0.0.1:9"
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
        "GCE_METADATA_HOST": closed,
        "GCE_METADATA_IP": closed,
    }


@pytest.mark.slow
@pytest.mark.parametrize("command", NEEDS_THE_PROJECT, ids=" ".join)
def test_without_credentials_every_command_says_what_to_run_in_one_line(
    command: list[str], no_credentials: dict[str, str], tmp_path: Path
) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "spotline.infra.cli.commands", *command],
        env=no_credentials,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = ran.stderr.strip().splitlines()
    assert ran.returncode == Exit.NOT_CONNECTED, ran.stderr
    assert len(errors) == 1, ran.stderr
    assert "gcloud auth application-default login" in errors[0]
    assert errors[0].startswith(f"spotline {command[0]}: ")


JOB_COMMANDS = [
    ["status", "{job}"],
    ["cancel", "{job}"],
    ["logs", "{job}"],
    ["timeline", "{job}"],
    ["watch", "{job}"],
    ["checkpoints", "{job}", "{out}"],
    ["tensorboard", "{job}", "{out}"],
    ["replay", "{job}"],
]


@pytest.mark.parametrize("command", JOB_COMMANDS, ids=lambda c: c[0])
def test_an_unknown_job_is_one_line_and_exit_1(
    command: list[str], project: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [part.format(job="no-such-job", out=tmp_path) for part in command]

    assert cli(argv) == Exit.FAILED

    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        line for line in captured.err.strip().splitlines() if "no job no-such-job" in line
    ], captured.err
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    assert "Traceback" not in captured.err + captured.out


def test_an_ended_job_reads_and_is_not_cancelled_again(
    project: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = FirestoreStore(project)
    store.create_job(
        job("ended-f", status=JobStatus.FAILED, substatus=JobSubstatus.FAILED, error="exit 3")
    )

    assert cli(["status", "ended-f"]) == Exit.OK
    assert "FAILED" in capsys.readouterr().out
    assert cli(["cancel", "ended-f"]) == Exit.OK
    assert "already ended: FAILED" in capsys.readouterr().out
    assert cli(["watch", "ended-f"]) == Exit.FAILED
    assert cli(["checkpoints", "ended-f", str(tmp_path)]) == Exit.FAILED
    # A line for each of what it looked for: checkpoints, then outputs.
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and all("job ended-f has no" in line for line in errors), errors


def test_traceback_shows_the_error_as_raised(project: str) -> None:
    with pytest.raises(JobNotFound):
        cli(["--traceback", "status", "no-such-job"])
    with pytest.raises(JobNotFound):
        cli(["status", "no-such-job", "--traceback"])
