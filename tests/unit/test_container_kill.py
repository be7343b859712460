"""``kill_container`` as the agent runs it when a container's trainer did
not stop in time: against the stand-in runtime, a failure is logged with the
runtime's words, never raised (the client is killed anyway)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spotline.vm_image.agent import container
from spotline.vm_image.agent.container import RUNTIME_ENV, kill_container
from tests.container_stand_in import StandIn


def warnings(out: str) -> list[str]:
    return [
        str(record["message"])
        for record in map(json.loads, out.splitlines())
        if record.get("severity") == "WARNING"
    ]


def test_no_such_container_is_logged_not_raised(
    stand_in: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    kill_container("spotline-j1-a1-g0", {RUNTIME_ENV: str(stand_in.path)}, job_id="j1")
    (said,) = warnings(capsys.readouterr().out)
    assert "kill spotline-j1-a1-g0 failed (exit code 1)" in said
    assert "No such container: spotline-j1-a1-g0" in said


def test_a_runtime_that_does_not_answer_is_given_up_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hung = tmp_path / "hung-docker"
    hung.write_text("#!/bin/sh\nexec sleep 60\n")
    hung.chmod(0o755)
    monkeypatch.setattr(container, "KILL_TIMEOUT_S", 0.5)
    kill_container("spotline-j1-a1-g0", {RUNTIME_ENV: str(hung)})
    (said,) = warnings(capsys.readouterr().out)
    assert said == f"{hung} kill spotline-j1-a1-g0 did not finish in 0.5 s"


def test_a_runtime_that_is_gone_is_logged_not_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kill_container("spotline-j1-a1-g0", {RUNTIME_ENV: str(tmp_path / "docker")})
    (said,) = warnings(capsys.readouterr().out)
    assert said.startswith("cannot kill the container spotline-j1-a1-g0: the container runtime")
