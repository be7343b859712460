"""The CLI never shows a secret-like env value, and does not publish one."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from spotline.infra.cli.commands import main
from spotline.infra.cli.report import job_detail
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec

VALUE = "hf_s3cr3tVALUEnobodyMayRead"
SPEC = {"user": "ada", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}


def test_submit_does_not_publish_a_literal_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({**SPEC, "env": {"HF_TOKEN": VALUE}}))

    # No stack and no project here: it stops before looking for either.
    assert main(["--workdir", str(tmp_path), "submit", str(spec)]) == 2

    out, err = capsys.readouterr()
    assert err.startswith("not published: env.HF_TOKEN: the name looks like a secret")
    assert "HF_TOKEN=sm://NAME" in err and VALUE not in out + err


def test_a_jobs_detail_shows_references_and_hides_secret_values() -> None:
    # A job stored before submissions were refused for it may hold a value.
    env = {"HF_TOKEN": VALUE, "WANDB_API_KEY": "sm://wandb", "HF_HOME": "/data/hf"}
    job = new_job(JobSpec.model_validate({**SPEC, "env": env}), "j1", "m1", datetime.now(UTC))

    shown = job_detail(job, [])

    assert "\nenv:\n  HF_HOME=/data/hf\n  HF_TOKEN=***\n  WANDB_API_KEY=sm://wandb" in shown
    assert VALUE not in shown
