"""The Python API against the real emulators: a spec spotline would refuse
raises naming every bad field and publishes nothing; a spec given as fields,
a file or a model is published as `spotline submit` publishes it, local
folders uploaded first; the jobs and the machines as records; a cancel; a
wait that runs out; the system found from another working folder."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import fsspec
import pytest
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

import spotline
from spotline.infra.cli.commands import main as cli
from spotline.infra.localstack.stack import LocalStack
from spotline.infra.localstack.storage import reload_fsspec_config
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.spec import JobSpec, parse_spec
from spotline.shared.domain.states import JobStatus
from tests.emulators.test_cli_status import a_job

GOOD = {"user": "ada", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}


def subscribe(project: str, topic: str) -> str:
    """A subscription to ``topic`` in the Pub/Sub emulator."""
    path = f"projects/{project}/topics/{topic}"
    PublisherClient().create_topic(name=path)
    subscription = f"projects/{project}/subscriptions/test-{topic}"
    SubscriberClient().create_subscription(name=subscription, topic=path)
    return subscription


def pulled(subscription: str) -> list[dict[str, Any]]:
    response = SubscriberClient().pull(subscription=subscription, max_messages=10, timeout=10)
    return [json.loads(m.message.data) for m in response.received_messages]


@pytest.fixture
def submissions(project: str) -> str:
    return subscribe(project, "spotline-submit")


def test_a_bad_spec_raises_naming_every_bad_field_and_publishes_nothing(
    submissions: str,
) -> None:
    # Two fields the model refuses, then two the admission checks refuse.
    with pytest.raises(spotline.SpecError) as raised:
        spotline.submit({**GOOD, "epochs": 0, "batch_size": -1})

    fields = [p.removeprefix("not a valid job spec: ").split(":")[0] for p in raised.value.problems]
    assert sorted(fields) == ["batch_size", "epochs"], raised.value.problems
    with pytest.raises(spotline.SpecError) as raised:
        spotline.submit({**GOOD, "machine_ids": ["no-such-machine"], "zones": ["mars-1a"]})
    named = "\n".join(raised.value.problems)
    assert "'no-such-machine' is not in the catalog" in named and "mars-1a" in named
    assert isinstance(raised.value, spotline.SpotlineError)
    assert "would refuse it" in str(raised.value)
    spotline.submit(GOOD)
    assert [m["user"] for m in pulled(submissions)] == ["ada"]  # only the good one


def test_a_spec_from_fields_a_file_or_a_model_is_published(
    submissions: str, tmp_path: Path
) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({**GOOD, "description": "from a file"}))

    jobs = [
        spotline.submit({**GOOD, "description": "from fields"}),
        spotline.submit(path),
        spotline.submit(str(path)),
        spotline.submit(JobSpec.model_validate({**GOOD, "description": "a model"})),
    ]

    sent = pulled(submissions)
    assert sorted(m["description"] for m in sent) == sorted(
        ["from fields", "from a file", "from a file", "a model"]
    )
    assert all(job.id.startswith("j") and job.published for job in jobs)
    assert len({job.id for job in jobs}) == 4  # each message its own job


def test_folders_are_uploaded_by_their_content_once(
    submissions: str, gcs: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_STORAGE_ROOT", gcs)
    code, data = tmp_path / "code", tmp_path / "data"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    (code / "pkg" / "util.py").write_text("X = 1\n")
    (code / ".spotlineignore").write_text("*.pt\n")
    (code / "weights.pt").write_bytes(b"w" * 100)
    data.mkdir()
    (data / "rows.csv").write_text("a,b\n1,2\n")
    spec = {"user": "ada", "machine_ids": ["g2-standard-4"], "command": ["python", "train.py"]}

    job = spotline.submit(spec, code_dir=code, data_dir=data)

    [sent] = pulled(submissions)
    assert "code_dir" not in sent and job.id.startswith("j")
    assert re.fullmatch(rf"{gcs}/code/[0-9a-f]{{64}}/files", sent["code_uri"])
    assert re.fullmatch(rf"{gcs}/data/[0-9a-f]{{64}}/files", sent["data_uri"])
    assert job.published is not None
    assert [(u.files, u.written) for u in job.published.uploads] == [(3, 3), (1, 1)]
    fs, root = fsspec.core.url_to_fs(sent["code_uri"])
    fs.invalidate_cache(root.rsplit("/", 1)[0])
    assert fs.cat(f"{root}/pkg/util.py") == b"X = 1\n"
    assert not fs.exists(f"{root}/weights.pt")  # .spotlineignore left it home
    manifest = json.loads(fs.cat(f"{root.rsplit('/', 1)[0]}/manifest.json"))
    assert sorted(f["path"] for f in manifest["files"]) == [
        ".spotlineignore",
        "pkg/util.py",
        "train.py",
    ]

    # The same folder again: nothing written, the same address.
    again = spotline.submit(spec, code_dir=code)
    [resent] = pulled(submissions)
    assert resent["code_uri"] == sent["code_uri"]
    assert again.published is not None and [u.written for u in again.published.uploads] == [0]

    # An upload cut short (its manifest never written) is made again, whole.
    (code / "train.py").write_text("print('changed')\n")
    first = spotline.submit(spec, code_dir=code)
    assert first.published is not None
    [cut] = first.published.uploads
    cut_root = cut.target.removesuffix("/files")
    fs.rm(f"{cut_root}/manifest.json")
    fs.rm(f"{cut.target}/pkg/util.py")
    redone = spotline.submit(spec, code_dir=code)
    assert redone.published is not None
    assert [u.written for u in redone.published.uploads] == [3]
    fs.invalidate_cache(cut.target)
    assert fs.cat(f"{cut.target}/pkg/util.py") == b"X = 1\n"
    pulled(submissions)

    # A folder that is not there, or holds nothing: nothing is published.
    with pytest.raises(spotline.InputsError, match="no such folder"):
        spotline.submit(spec, code_dir=tmp_path / "empty-missing")
    with pytest.raises(spotline.SpecError, match="code_uri: given with code_dir"):
        spotline.submit({**spec, "code_uri": "gs://b/c"}, code_dir=code)
    assert pulled(submissions) == []


def test_a_spec_files_code_dir_is_relative_to_the_file_and_never_published(
    submissions: str, gcs: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_STORAGE_ROOT", gcs)
    (tmp_path / "proj" / "src").mkdir(parents=True)
    (tmp_path / "proj" / "src" / "train.py").write_text("print('hi')\n")
    spec = {"user": "ada", "machine_ids": ["g2-standard-4"], "command": ["python", "train.py"]}
    (tmp_path / "proj" / "job.json").write_text(json.dumps({**spec, "code_dir": "src"}))
    monkeypatch.chdir(tmp_path)  # not the spec's folder: ./src is not here

    job = spotline.submit(tmp_path / "proj" / "job.json")

    [sent] = pulled(submissions)
    assert "code_dir" not in sent and sent["code_uri"].startswith(f"{gcs}/code/")
    assert job.published is not None
    assert job.published.uploads[0].folder == tmp_path / "proj" / "src"
    assert spotline.validate(tmp_path / "proj" / "job.json").code_uri == sent["code_uri"]
    # A spec published straight through Pub/Sub with code_dir: the submit
    # function refuses it, saying what to do.
    with pytest.raises(InvalidMessage) as refused:
        parse_spec(json.dumps({**spec, "code_dir": "src"}).encode())
    assert str(refused.value).startswith("code_dir: a folder on the submitting machine")
    assert "`spotline submit FILE`" in str(refused.value)


def test_jobs_are_listed_as_records_newest_first(project: str) -> None:
    store = FirestoreStore(project)
    for made in (
        a_job("old", "ada", 30, JobStatus.COMPLETED),
        a_job("new", "bob", 1, JobStatus.TRAINING, progress="2/5"),
    ):
        store.create_job(made)

    listed = spotline.jobs()

    assert [j.job_id for j in listed] == ["new", "old"]
    assert listed[0].progress == "2/5" and not listed[0].ended and listed[1].ended
    assert [j.job_id for j in spotline.jobs(active=True)] == ["new"]
    assert [j.job_id for j in spotline.jobs(user="ada")] == ["old"]
    assert spotline.Job("new").status().status == "TRAINING"
    with pytest.raises(spotline.JobNotFound):
        spotline.Job("nope").status()


def test_machines_are_the_catalog_with_prices(
    project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_COMPUTE_ENDPOINT", "http://127.0.0.1:9")  # quotas unreadable

    offers = {m.machine_id: m for m in spotline.machines()}

    spot, on_demand = offers["g2-standard-4"], offers["g2-standard-4.od"]
    assert (spot.provisioning, on_demand.provisioning) == ("SPOT", "STANDARD")
    assert 0 < spot.usd_per_hour < on_demand.usd_per_hour
    assert spot.gpu_count == 1 and spot.capacity is None and spot.in_use == 0


def test_cancel_publishes_for_an_active_job_only(project: str) -> None:
    cancels = subscribe(project, "spotline-cancel")
    store = FirestoreStore(project)
    store.create_job(a_job("running", "ada", 5, JobStatus.TRAINING))
    store.create_job(a_job("done", "ada", 5, JobStatus.COMPLETED))

    assert spotline.Job("running").cancel(reason="not needed") is True
    assert spotline.Job("done").cancel() is False

    assert [(m["job_id"], m["reason"]) for m in pulled(cancels)] == [("running", "not needed")]


def test_wait_runs_out_with_a_clear_error(project: str) -> None:
    FirestoreStore(project).create_job(a_job("slow", "ada", 1, JobStatus.QUEUING))

    with pytest.raises(spotline.WaitTimeout, match=r"has not ended after 0\.5 s") as raised:
        spotline.Job("slow").wait(timeout=0.5)

    assert isinstance(raised.value, TimeoutError) and raised.value.status.startswith("QUEUING")


def test_spotline_workdir_finds_the_local_stack_from_another_folder(
    shared_stack: LocalStack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = shared_stack.options.project
    with shared_stack.environment():
        FirestoreStore(project).create_job(a_job("found-by-workdir", "ada", 0, JobStatus.QUEUING))
    assert "FIRESTORE_EMULATOR_HOST" not in os.environ
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    try:
        with pytest.raises(spotline.NotConnected, match="run `spotline up`"):
            spotline.jobs()
        monkeypatch.setenv("SPOTLINE_WORKDIR", str(shared_stack.workdir))

        assert "found-by-workdir" in [j.job_id for j in spotline.jobs(limit=50)]
        assert cli(["status", "found-by-workdir"]) == 0
        assert "found-by-workdir" in capsys.readouterr().out
    finally:
        for name in shared_stack.client_env():
            os.environ.pop(name, None)  # connect pointed this process at the stack
        reload_fsspec_config()


def test_wait_for_an_ended_job_is_its_final_state_at_once(project: str) -> None:
    FirestoreStore(project).create_job(
        a_job("broken", "ada", 3, JobStatus.FAILED).model_copy(update={"error": "it broke"})
    )

    state = spotline.Job("broken").wait(timeout=1)

    assert (state.status, state.error) == ("FAILED", "it broke")


class _Interrupted(io.StringIO):
    """A terminal where Ctrl-C lands while the first line is written."""

    def write(self, text: str) -> int:
        raise KeyboardInterrupt


def test_an_interrupted_watch_raises_keyboard_interrupt(project: str) -> None:
    FirestoreStore(project).create_job(a_job("long", "ada", 1, JobStatus.TRAINING))

    with pytest.raises(KeyboardInterrupt):
        spotline.Job("long").watch(out=_Interrupted(), live=False)

    assert spotline.Job("long").status().status == "TRAINING"  # it goes on
