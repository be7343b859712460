"""A job's timeline, per attempt and in total, written on
the job document at every move, and ``spotline timeline`` (a table, JSON, the
pie and funnel charts as PNG files)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobSubstatus as S
from spotline.shared.domain.transitions import move_job, next_attempt
from tests.documents import T0, at

SPEC = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}


def a_preempted_job() -> JobDoc:
    """Requested at 0 s, trains from 6 s, preempted at 60 s, waits for capacity
    61-70 s, trains again from 75 s, returns at 100 s, done at 102 s: every move
    through the choke point, as the handlers make them."""
    job = new_job(JobSpec.model_validate(SPEC), "tl1", "m1", T0)
    for second, to in ((1, S.CONNECTING_SERVER), (3, S.GEARING_UP_ENV)):
        job = move_job(job, to, at(second))
    job = move_job(move_job(job, S.SENDING_MODEL_AND_DATA, at(4)), S.TRAINING, at(6))
    job = next_attempt(job, S.PREEMPTED, at(60), "preempted", max_attempts=5)
    job = move_job(job, S.WAITING_FOR_CAPACITY, at(61))
    job = move_job(job, S.REQUESTING_SERVER, at(70))
    for second, to in ((71, S.CONNECTING_SERVER), (73, S.GEARING_UP_ENV)):
        job = move_job(job, to, at(second))
    job = move_job(move_job(job, S.SENDING_MODEL_AND_DATA, at(74)), S.TRAINING, at(75))
    return move_job(move_job(job, S.RETURNING, at(100)), S.COMPLETED, at(102))


@pytest.fixture
def stored(project: str) -> JobDoc:
    job = a_preempted_job()
    FirestoreStore(project).create_job(job)
    return job


def test_spotline_timeline_prints_the_table_and_json(
    stored: JobDoc, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["timeline", stored.job_id]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "job tl1: COMPLETED, 1 min 42 s, 2 attempt(s), 1 preemption(s)"
    header = ["PHASE", "ATTEMPT", "1", "ATTEMPT", "2", "TOTAL", "SHARE"]
    assert out.splitlines()[1].split() == header
    training = next(line for line in out.splitlines() if line.startswith("training"))
    assert training.split() == ["training", "54", "s", "25", "s", "1", "min", "19", "s", "77%"]

    assert cli(["timeline", stored.job_id, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["waiting_for_capacity"] == 9 and data["seconds"] == 102
    assert data["attempts"]["2"]["training"] == 25


@pytest.mark.parametrize("chart", ["pie", "funnel"])
def test_spotline_timeline_draws_the_pie_and_funnel_charts(
    stored: JobDoc, chart: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / f"{chart}.png"
    assert cli(["timeline", stored.job_id, "--chart", chart, "-o", str(path)]) == 0
    assert f"chart: {path}" in capsys.readouterr().out
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (800, 500) and len(data) > 10_000


def test_spotline_timeline_of_an_unknown_job_fails(
    project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["timeline", "nope"]) == 1
    assert "no job nope" in capsys.readouterr().err


def test_a_chart_without_o_goes_to_the_workdirs_charts_folder(
    stored: JobDoc,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("matplotlib")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    monkeypatch.setenv("SPOTLINE_WORKDIR", str(tmp_path / "stackdir"))

    assert cli(["timeline", stored.job_id, "--chart", "pie"]) == 0

    path = tmp_path / "stackdir" / "charts" / f"{stored.job_id}-timeline-pie.png"
    assert f"chart: {path}" in capsys.readouterr().out
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert list((tmp_path / "here").iterdir()) == []  # nothing in the working folder
    assert cli(["timeline", stored.job_id, "--chart", "pie", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["job_id"] == stored.job_id and f"chart: {path}" in err
