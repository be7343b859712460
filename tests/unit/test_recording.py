"""The ``record`` switch, short of a running job: where the snapshot goes, and
that the CLI copies it whole and once (on local folders through fsspec's
``file://``). The whole round, recorded code replayed after the original
changed, runs on the local stack in tests/e2e/test_e2e_replay.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message
from spotline.functions.handlers.submit_job import submit_job
from spotline.infra.client.recording import (
    copy_folder,
    snapshot_complete,
    snapshot_digest,
    take_snapshot,
)
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain.recording import record_for
from spotline.shared.domain.spec import JobSpec
from spotline.shared.settings import Settings

BASE = {"user": "alice", "machine_ids": ["g2-standard-4"], "command": ["python", "train.py"]}


def folder(root: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root.as_uri()


def test_a_recorded_jobs_snapshot_lives_under_its_prefix() -> None:
    spec = JobSpec.model_validate({**BASE, "record": True, "code_uri": "gs://b/c"})
    record = record_for("gs://bucket/root/jobs/job1", spec)
    assert record is not None
    assert record.code_uri == "gs://bucket/root/jobs/job1/record/code"
    assert record.data_uri is None  # it has no data to keep
    assert record.marker_uri == "gs://bucket/root/jobs/job1/record/RECORD_COMPLETE.json"
    assert record_for("gs://b/jobs/job1", JobSpec.model_validate(BASE)) is None


def test_the_snapshot_is_copied_once_and_keeps_what_it_copied(tmp_path: Path) -> None:
    code = folder(tmp_path / "code", {"train.py": "v1", "lib/util.py": "u1"})
    data = folder(tmp_path / "data", {"x.csv": "1,2"})
    spec = JobSpec.model_validate({**BASE, "record": True, "code_uri": code, "data_uri": data})
    record = record_for((tmp_path / "store" / "jobs" / "job1").as_uri(), spec)
    assert record is not None and not snapshot_complete(record)
    assert take_snapshot(record, spec) == {record.code_uri: 2, record.data_uri: 1}
    assert snapshot_complete(record)
    (tmp_path / "code" / "train.py").write_text("v2")  # the original changes
    assert take_snapshot(record, spec) is None  # the same job again: nothing copied twice
    kept = tmp_path / "store" / "jobs" / "job1" / "record"
    assert (kept / "code" / "train.py").read_text() == "v1"
    assert (kept / "code" / "lib" / "util.py").read_text() == "u1"
    assert (kept / "data" / "x.csv").read_text() == "1,2"
    marker = json.loads((kept / "RECORD_COMPLETE.json").read_text())
    assert marker["code_uri"] == code and marker["files"][record.code_uri] == 2


def test_a_snapshot_cut_short_is_made_again_whole(tmp_path: Path) -> None:
    code = folder(tmp_path / "code", {"train.py": "v2"})
    spec = JobSpec.model_validate({**BASE, "record": True, "code_uri": code})
    record = record_for((tmp_path / "store" / "jobs" / "job1").as_uri(), spec)
    assert record is not None
    # A first copy died half-way, before its marker: a file of an older code.
    folder(tmp_path / "store" / "jobs" / "job1" / "record" / "code", {"old.py": "stale"})
    assert not snapshot_complete(record)
    assert take_snapshot(record, spec) == {record.code_uri: 1}
    kept = tmp_path / "store" / "jobs" / "job1" / "record" / "code"
    assert sorted(p.name for p in kept.iterdir()) == ["train.py"]


def test_an_empty_source_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    try:
        copy_folder((tmp_path / "empty").as_uri(), (tmp_path / "to").as_uri())
    except FileNotFoundError as err:
        assert "nothing stored under file://" in str(err) and "empty" in str(err)
    else:
        raise AssertionError("an empty folder was copied")


def test_the_job_document_keeps_the_snapshots_place(cloud: LocalCloud, tmp_path: Path) -> None:
    store = InMemoryStore()
    settings = Settings(
        project=cloud.project,
        compute_endpoint=cloud.endpoint,
        zones=("us-central1-a",),
        storage_root=(tmp_path / "store").as_uri(),
    )
    now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    spec = {**BASE, "job_id": "job1", "record": True, "code_uri": "gs://b/code"}
    message = Message(data=json.dumps(spec).encode(), message_id="m1", publish_time=now)
    for _ in range(2):  # redelivered: the same document
        submit_job.__wrapped__(message, Deps(settings, store=store, clock=lambda: now))  # type: ignore[attr-defined]
    job = store.get_job("job1")
    assert job is not None and job.record is not None
    assert job.record.code_uri == f"{settings.job_prefix('job1')}/record/code"
    assert job.record.data_uri is None


def test_the_snapshots_digest_is_kept_with_the_record_and_changes_with_any_file(
    tmp_path: Path,
) -> None:
    code = folder(tmp_path / "code", {"train.py": "print(1)\n", "lib/util.py": "X = 1\n"})
    spec = JobSpec.model_validate({**BASE, "job_id": "j1", "record": True, "code_uri": code})
    record = record_for((tmp_path / "store" / "jobs" / "j1").as_uri(), spec)
    assert record is not None
    take_snapshot(record, spec)
    digest = snapshot_digest(record)
    assert snapshot_digest(record) == digest  # the same files, the same digest

    kept = record_for("gs://b/jobs/j1", spec.model_copy(update={"snapshot_digest": digest}))
    assert kept is not None and kept.digest == digest
    assert record.code_uri is not None
    rewritten = Path(record.code_uri.removeprefix("file://")) / "lib" / "util.py"
    rewritten.write_text("X = 2\n")
    assert snapshot_digest(record) != digest
    rewritten.write_text("X = 1\n")
    (rewritten.parent / "added.py").write_text("")
    assert snapshot_digest(record) != digest
