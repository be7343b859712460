"""Record and replay on the whole local stack: ``spotline submit`` of a
recorded job keeps its code and data in the job's storage; the originals
change; ``spotline replay`` runs the recorded code, and with ``--code-dir``,
``--data-dir`` and ``--wait-request-s`` runs what it is given."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.client.recording import copy_folder
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus
from tests.e2e.test_e2e_recovery import once

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]

# Reports the version its code folder holds, and how many lines its data has.
TRAIN = """\
import json, os, pathlib
version = float(pathlib.Path("VERSION").read_text())
with open(os.environ["SPOTLINE_EVENTS"], "a") as events:
    events.write(json.dumps({"type": "epoch", "epoch": 1, "epochs": 1, "step": 1,
                             "metrics": {"version": version}}) + "\\n")
print(f"code version {version}", flush=True)
"""


def code(folder: Path, version: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    (folder / "VERSION").write_text(str(version))
    return folder


def data(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rows.csv").write_text(text)
    return folder


def read(uri: str) -> str:
    with fsspec.open(uri, "r") as stored:
        return str(stored.read())


def finished(store: FirestoreStore, out: str) -> JobDoc:
    """The job a submit or replay printed, once it has ended."""
    marker = " as job " if " as job " in out else "job id: "
    job_id = out.split(marker)[1].split()[0]
    job = wait_for_job(store, job_id, 120, echo=False)
    assert job.status == JobStatus.COMPLETED, job.error
    return job


def test_a_replay_runs_the_recorded_code_not_the_changed_original(
    local_stack: LocalStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert local_stack.storage is not None
    workdir = ["--workdir", str(local_stack.workdir)]
    store = FirestoreStore(local_stack.options.project)
    originals = f"{local_stack.storage.root}/originals/{tmp_path.name}"
    copy_folder(code(tmp_path / "v1", 1).as_uri(), f"{originals}/code")
    copy_folder(data(tmp_path / "d1", "a\nb\n").as_uri(), f"{originals}/data")
    spec = tmp_path / "job.json"
    fields = {
        "user": "carol",
        "machine_ids": ["g2-standard-4"],
        "command": ["python", "train.py"],
        "code_uri": f"{originals}/code",
        "data_uri": f"{originals}/data",
        "record": True,
    }
    spec.write_text(json.dumps(fields))
    capsys.readouterr()
    assert cli([*workdir, "submit", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "recorded 3 file(s) into" in out
    original = finished(store, out)
    assert original.metrics == {"version": 1.0} and original.record is not None
    prefix = f"{local_stack.storage.root}/jobs/{original.job_id}/record"
    assert (original.record.code_uri, original.record.data_uri) == (
        f"{prefix}/code",
        f"{prefix}/data",
    )

    # The originals change after the job ran.
    copy_folder(code(tmp_path / "v2", 2).as_uri(), f"{originals}/code")
    copy_folder(data(tmp_path / "d2", "changed\n").as_uri(), f"{originals}/data")

    assert cli([*workdir, "replay", original.job_id, "--wait-request-s", "77"]) == 0
    replay = finished(store, capsys.readouterr().out)
    assert replay.metrics == {"version": 1.0}  # the recorded code, not version 2
    assert (replay.spec.code_uri, replay.spec.data_uri) == (f"{prefix}/code", f"{prefix}/data")
    assert read(f"{prefix}/data/rows.csv") == "a\nb\n"
    assert replay.spec.wait_request_s == 77 and not replay.spec.record

    # Local folders, uploaded by the address of their content.
    code(tmp_path / "v3", 3)
    data(tmp_path / "d3", "local\n")
    args = ["replay", original.job_id, "--code-dir", str(tmp_path / "v3")]
    assert cli([*workdir, *args, "--data-dir", str(tmp_path / "d3"), "--description", "v3"]) == 0
    local = finished(store, capsys.readouterr().out)
    assert local.metrics == {"version": 3.0} and local.description == "v3"
    root = local_stack.storage.root
    assert local.spec.code_uri and local.spec.code_uri.startswith(f"{root}/code/")
    assert local.spec.data_uri and local.spec.data_uri.startswith(f"{root}/data/")
    assert read(f"{local.spec.data_uri}/rows.csv") == "local\n"

    # The snapshot rewritten in the bucket (which every VM of the shared
    # account may write): its digest, kept in Firestore, no longer matches.
    kept = original.record.digest
    assert kept is not None and kept == original.spec.snapshot_digest
    with fsspec.open(f"{prefix}/code/train.py", "w") as rewritten:
        rewritten.write("print('not what ran')\n")
    capsys.readouterr()
    assert cli([*workdir, "replay", original.job_id]) != 0
    said = capsys.readouterr().err
    assert "snapshot was changed since it was recorded" in said and kept in said
    now = said.split("the digest ")[1].split(",")[0]
    assert len(now) == 64 and now != kept


# Reports attempt and code version as its epoch; attempt 1 then waits to be
# preempted.
TRAIN_UNTIL_PREEMPTED = """\
import json, os, pathlib, time
version = float(pathlib.Path("VERSION").read_text())
rows = len(pathlib.Path(os.environ["SPOTLINE_DATA_DIR"], "rows.csv").read_text().split())
attempt = int(os.environ["SPOTLINE_ATTEMPT"])
with open(os.environ["SPOTLINE_EVENTS"], "a") as events:
    events.write(json.dumps({"type": "epoch", "epoch": attempt, "epochs": 2, "step": attempt,
                             "metrics": {"version": version, "rows": rows}}) + "\\n")
print(f"attempt {attempt}: code version {version}, {rows} rows", flush=True)
if attempt == 1:
    time.sleep(120)
"""


def test_a_recorded_job_runs_its_snapshot_on_every_attempt(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    """The originals change while attempt 1 runs; the preempted job's attempt 2
    runs the recorded code and data, as its replay would: what ran is what
    was recorded."""
    assert local_stack.storage is not None
    store = FirestoreStore(local_stack.options.project)
    originals = f"{local_stack.storage.root}/originals/{tmp_path.name}"
    first = code(tmp_path / "v1", 1)
    (first / "train.py").write_text(TRAIN_UNTIL_PREEMPTED)
    copy_folder(first.as_uri(), f"{originals}/code")
    copy_folder(data(tmp_path / "d1", "a\nb\n").as_uri(), f"{originals}/data")
    spec = tmp_path / "job.json"
    spec.write_text(
        json.dumps(
            {
                "user": "dave",
                "machine_ids": ["g2-standard-4"],
                "command": ["python", "train.py"],
                "code_uri": f"{originals}/code",
                "data_uri": f"{originals}/data",
                "epochs": 2,
                "record": True,
                "job_id": "recorded-preempted",
            }
        )
    )
    workdir = ["--workdir", str(local_stack.workdir)]
    job_id = "recorded-preempted"
    assert cli([*workdir, "submit", str(spec)]) == 0

    def change_and_preempt(job: JobDoc) -> None:
        second = code(tmp_path / "v2", 2)
        (second / "train.py").write_text(TRAIN_UNTIL_PREEMPTED)
        copy_folder(second.as_uri(), f"{originals}/code")
        copy_folder(data(tmp_path / "d2", "changed\n").as_uri(), f"{originals}/data")
        cli([*workdir, "preempt", job.job_id, "--notice-s", "5"])

    preempt = once(change_and_preempt, when=lambda j: j.epoch >= 1)
    job = wait_for_job(store, job_id, 180, echo=False, on_update=preempt)

    assert job.status == JobStatus.COMPLETED, job.error
    assert job.attempt == 2 and job.preemptions == 1
    assert job.metrics == {"version": 1.0, "rows": 2.0}  # the snapshot, not version 2
