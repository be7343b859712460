"""A recorded job's snapshot sits in the bucket, where more than its owner
may write. The agent checks the files it downloaded against the digest kept
when the snapshot was recorded, and does not run a rewritten one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spotline.infra.client.recording import snapshot_digest
from spotline.shared.contract.assignment import Assignment
from spotline.shared.domain.recording import Record
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import Vm, next_finished

pytestmark = pytest.mark.emulators


def _recorded(vm: Vm, tmp_path: Path, job_id: str) -> tuple[str, Path, str]:
    """An assignment running a snapshot of code whose train.py leaves a mark;
    the snapshot's train.py, and the digest kept when it was recorded."""
    mark = tmp_path / f"{job_id}-ran"
    snapshot = tmp_path / job_id / "record"
    (snapshot / "code").mkdir(parents=True)
    train = snapshot / "code" / "train.py"
    train.write_text(f"open({str(mark)!r}, 'w').close()\n")
    (snapshot / "RECORD_COMPLETE.json").write_text("{}")
    record = Record(
        code_uri=(snapshot / "code").as_uri(),
        marker_uri=(snapshot / "RECORD_COMPLETE.json").as_uri(),
    )
    digest = snapshot_digest(record)
    original = tmp_path / job_id / "original"
    original.mkdir()
    command = [sys.executable, "train.py"]
    assignment = Assignment.model_validate_json(
        vm.assignment(job_id, command, code_uri=original.as_uri(), record=True)
    )
    recorded = assignment.model_copy(
        update={"record": record.model_copy(update={"digest": digest})}
    )
    return recorded.model_dump_json(), train, digest


def test_a_rewritten_snapshot_is_not_run(vm: Vm, agent_topics: Topics, tmp_path: Path) -> None:
    assignment, train, digest = _recorded(vm, tmp_path, "jrec")
    train.write_text("print('not what was recorded')\n")

    vm.boot(assignment, SPOTLINE_TRAINER_USER="")
    event = next_finished(agent_topics)

    assert event.exit_code != 0 and event.unrecoverable
    assert "snapshot was changed since it was recorded" in event.log_tail, event.log_tail
    assert f"not {digest}" in event.log_tail
    assert not (tmp_path / "jrec-ran").exists()


def test_the_snapshot_as_recorded_runs(vm: Vm, agent_topics: Topics, tmp_path: Path) -> None:
    assignment, _, _ = _recorded(vm, tmp_path, "jok")

    vm.boot(assignment, SPOTLINE_TRAINER_USER="")
    event = next_finished(agent_topics)

    assert event.exit_code == 0, event.log_tail
    assert (tmp_path / "jok-ran").exists()
