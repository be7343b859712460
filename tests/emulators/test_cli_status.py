"""`spotline status` for a person and a script, against the real Firestore emulator:
the newest jobs first, filters, a table fitted to the terminal, `--json`, one
job's details; and `submit` refusing a spec the function would reject, before
publishing anything."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
from rich.console import Console

from spotline.functions import deps
from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.jobs_table import jobs_table
from spotline.infra.localcloud.wire import HttpService
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import (
    AttemptRecord,
    EpochDoc,
    HistoryEntry,
    JobDoc,
    Rejection,
)
from spotline.shared.domain.lifecycle import logs_query
from spotline.shared.domain.recording import Record
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.documents import job
from tests.logging_double import LoggingDouble, an_entry

NOW = datetime.now(UTC).replace(microsecond=0)
WIDE = "a-description-long-enough-to-be-cut-on-a-narrow-terminal " * 2


def a_job(
    job_id: str,
    user: str,
    minutes_ago: float,
    status: JobStatus,
    spec: dict[str, Any] | None = None,
    **fields: Any,
) -> JobDoc:
    substatus = {
        JobStatus.COMPLETED: JobSubstatus.COMPLETED,
        JobStatus.CANCELED: JobSubstatus.CANCELED,
        JobStatus.QUEUING: JobSubstatus.REQUESTING_SERVER,
    }.get(status, JobSubstatus.TRAINING)
    created = NOW - timedelta(minutes=minutes_ago)
    return job(
        job_id,
        status=status,
        substatus=substatus,
        spec={"user": user, "description": WIDE[:100], **(spec or {})},
        created_at=created,
        updated_at=created,
        **fields,
    )


@pytest.fixture
def jobs(project: str) -> FirestoreStore:
    """Six jobs of two users, created out of both key and time order."""
    store = FirestoreStore(project)
    for made in (
        a_job("c-ada", "ada", 50, JobStatus.TRAINING, preemptions=2, progress="3/10"),
        a_job("a-bob", "bob", 10, JobStatus.COMPLETED),
        a_job("e-ada", "ada", 5, JobStatus.QUEUING),
        a_job("b-ada", "ada", 90, JobStatus.CANCELED),
        a_job("d-bob", "bob", 30, JobStatus.RECOVERING, preemptions=1),
        a_job("f-ada", "ada", 70, JobStatus.COMPLETED),
    ):
        assert store.create_job(made)
    return store


def listed(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    assert cli(["status", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_status_lists_the_newest_first_with_a_limit_and_filters(
    jobs: FirestoreStore, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [j["job_id"] for j in listed(capsys)]
    assert ids == ["e-ada", "a-bob", "d-bob", "c-ada", "f-ada", "b-ada"]
    assert [j["job_id"] for j in listed(capsys, "--limit", "2")] == ["e-ada", "a-bob"]
    assert [j["job_id"] for j in listed(capsys, "--user", "bob")] == ["a-bob", "d-bob"]
    active = [j["job_id"] for j in listed(capsys, "--active")]
    assert active == ["e-ada", "d-bob", "c-ada"]
    assert [j["job_id"] for j in listed(capsys, "--active", "--user", "ada")] == ["e-ada", "c-ada"]
    assert listed(capsys, "--user", "nobody") == []


def test_status_json_has_stable_keys_and_iso_timestamps(
    jobs: FirestoreStore, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = listed(capsys)
    assert len({tuple(j) for j in shown}) == 1  # every job has the same keys
    c_ada = next(j for j in shown if j["job_id"] == "c-ada")
    assert datetime.fromisoformat(c_ada["created_at"]) == NOW - timedelta(minutes=50)
    assert c_ada["ended_at"] is None and c_ada["preemptions"] == 2
    assert c_ada["duration_s"] >= 50 * 60
    done = next(j for j in shown if j["job_id"] == "a-bob")
    assert done["status"] == "COMPLETED" and done["ended_at"] is not None


@pytest.mark.parametrize("width", [80, 200])
def test_the_table_fits_the_terminal(
    jobs: FirestoreStore,
    width: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    assert cli(["status"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines and all(len(line) <= width for line in lines), out
    assert "\x1b[" not in out  # not a terminal: no colors
    assert all(line == line.rstrip() for line in lines)  # no padding after the last cell
    headers = lines[0].split()
    for needed in ("JOB", "STATUS", "PROGRESS", "SUBMITTED", "DURATION", "PREEMPTIONS"):
        assert needed in headers
    # Saved against on demand: not to be read as a checkpoint saved.
    wide_only = {"SUBSTATUS", "MACHINE", "COST_USD", "SPOT_SAVING", "DESCRIPTION"}
    assert wide_only <= set(headers) if width == 200 else not wide_only <= set(headers)
    # Newest first; every job's id whole, and its age.
    rows = [line.split() for line in lines[1:]]
    assert [row[0] for row in rows] == ["e-ada", "a-bob", "d-bob", "c-ada", "f-ada", "b-ada"]
    # NOW is the module's import time: the test may run long after it (1h12m ago).
    age = re.search(r"(?:(\d+)h)?(\d+)m(?:\d\ds)? ago", lines[4])
    assert lines[4].startswith("c-ada") and age is not None
    assert int(age[1] or 0) * 60 + int(age[2]) >= 50


def test_a_terminal_gets_colors_and_still_fits(jobs: FirestoreStore) -> None:
    shown = jobs.recent_jobs(10)
    for width in (80, 200):
        console = Console(
            file=io.StringIO(),
            width=width,
            record=True,
            force_terminal=True,
            color_system="standard",
        )
        console.print(jobs_table(shown, NOW, console.width))
        text = console.export_text(styles=False, clear=False)
        assert all(len(line) <= width for line in text.splitlines()), text
        assert "\x1b[" in console.export_text(styles=True)


def test_status_of_one_job_shows_spec_checkpoints_and_logs(
    project: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_STORAGE_ROOT", "gs://bucket/spotline")
    store = FirestoreStore(project)
    env = {"API_TOKEN": "tok-123", "db_password": "pw-456", "LEARNING_RATE": "0.1"}
    attempt = AttemptRecord(
        attempt=1,
        instance="sl-one-a1",
        zone="us-central1-a",
        machine_id="g2-standard-4",
        started_at=NOW,
        logs_query='resource.type="gce_instance" AND jsonPayload.job_id="one"',
    )
    store.create_job(
        a_job(
            "one",
            "ada",
            3,
            JobStatus.TRAINING,
            spec={"user": "ada", "env": env},
            attempts=[attempt],
            checkpoint_uri="gs://bucket/spotline/jobs/one/checkpoints/step-40",
            history=[HistoryEntry(at=NOW, status="QUEUING")],
            record=Record(
                code_uri="gs://bucket/spotline/jobs/one/record/code",
                marker_uri="gs://bucket/spotline/jobs/one/record/RECORD_COMPLETE.json",
            ),
        )
    )
    store.put_epoch(
        "one", EpochDoc(epoch=1, epochs=3, attempt=1, step=40, instance="sl-one-a1", at=NOW)
    )

    assert cli(["status", "one", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["job_id"] == "one" and shown["spec"]["user"] == "ada"
    assert shown["spec"]["env"] == {
        "API_TOKEN": "***",
        "db_password": "***",
        "LEARNING_RATE": "0.1",
    }
    assert shown["checkpoint_dir"] == "gs://bucket/spotline/jobs/one/checkpoints"
    assert shown["checkpoint_uri"].endswith("step-40")
    assert shown["logs"] == [{"attempt": 1, "instance": "sl-one-a1", "query": attempt.logs_query}]
    assert [e["step"] for e in shown["epochs"]] == [40]
    assert shown["record"] == {
        "code_uri": "gs://bucket/spotline/jobs/one/record/code",
        "data_uri": None,
        "marker_uri": "gs://bucket/spotline/jobs/one/record/RECORD_COMPLETE.json",
        "digest": None,  # recorded before digests were kept
    }
    assert datetime.fromisoformat(shown["history"][0]["at"]) == NOW

    assert cli(["status", "one"]) == 0
    text = capsys.readouterr().out
    assert "gs://bucket/spotline/jobs/one/checkpoints" in text
    assert "recorded     code gs://bucket/spotline/jobs/one/record/code" in text
    assert f"gcloud logging read '{attempt.logs_query}' --project {project}" in text
    assert '"LEARNING_RATE": "0.1"' in text and '"API_TOKEN": "***"' in text
    assert "tok-123" not in text and "pw-456" not in text

    assert cli(["status", "nope"]) == 1
    assert "no job nope" in capsys.readouterr().err


def test_rejected_and_machines_print_json(
    project: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:

    store = FirestoreStore(project)
    for n in range(3):
        store.record_rejection(
            Rejection(message_id=f"m{n}", reason=f"bad {n}", payload="{}", at=NOW + timedelta(n))
        )
    assert cli(["rejected", "--json", "--limit", "2"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [r["message_id"] for r in shown] == ["m2", "m1"]
    assert shown[0]["reason"] == "bad 2"
    assert datetime.fromisoformat(shown[0]["at"]) == NOW + timedelta(2)

    monkeypatch.setenv("SPOTLINE_COMPUTE_ENDPOINT", "http://127.0.0.1:9")  # quotas unreadable
    deps.reset()
    assert cli(["machines", "--json"]) == 0
    machines = {m["machine_id"]: m for m in json.loads(capsys.readouterr().out)}
    spot, od = machines["g2-standard-4"], machines["g2-standard-4.od"]
    assert spot["provisioning"] == "SPOT" and od["provisioning"] == "STANDARD"
    assert spot["usd_per_hour"] < od["usd_per_hour"]
    assert spot["gpu_count"] == 1 and spot["capacity"] is None and spot["in_use"] == 0


# -- submit: validated before anything is published -----------------------------


@pytest.fixture
def submissions(project: str) -> str:
    """A subscription to spotline-submit in the Pub/Sub emulator."""
    topic = f"projects/{project}/topics/spotline-submit"
    PublisherClient().create_topic(name=topic)
    subscription = f"projects/{project}/subscriptions/submissions"
    SubscriberClient().create_subscription(name=subscription, topic=topic)
    return subscription


def published(subscription: str) -> list[dict[str, Any]]:
    response = SubscriberClient().pull(subscription=subscription, max_messages=10, timeout=10)
    return [json.loads(m.message.data) for m in response.received_messages]


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}, "user: Field required"),
        (
            {"user": "ada", "machine_ids": ["no-such-machine"], "trainer": "digits_mlp"},
            "'no-such-machine' is not in the catalog",
        ),
        (
            {"user": "ada", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp", "nodes": 9},
            "nodes: 9 VMs is over the active-instances quota",
        ),
    ],
)
def test_submit_refuses_an_invalid_spec_and_publishes_nothing(
    submissions: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    spec: dict[str, Any],
    named: str,
) -> None:
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_text(json.dumps(spec))
    good.write_text(
        json.dumps({"user": "ada", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"})
    )

    assert cli(["submit", str(bad)]) == 2  # a usage error, as argparse's
    out, err = capsys.readouterr()
    assert named in err and "published" not in out
    assert cli(["submit", str(good)]) == 0
    # Only the good one reached the topic (a pull returns what is there).
    assert [m["user"] for m in published(submissions)] == ["ada"]


def test_submit_dry_run_prints_the_validated_spec_and_publishes_nothing(
    submissions: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.json"
    spec = {"user": "ada", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}
    env = {"HF_TOKEN": "sm://hf-token", "HF_HOME": "/data/hf"}  # a secret by reference
    path.write_text(json.dumps({**spec, "env": env}))

    assert cli(["submit", "--dry-run", str(path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["user"] == "ada" and shown["epochs"] == 1  # defaults filled in
    assert shown["env"] == env
    path.write_text(json.dumps({**spec, "description": "the real one"}))
    assert cli(["submit", str(path)]) == 0
    assert re.search(r"job id: j[0-9a-f]{12}", capsys.readouterr().out)
    assert [m.get("description") for m in published(submissions)] == ["the real one"]


def test_submit_json_prints_what_was_published_and_nothing_else_on_stdout(
    submissions: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    source = f"print({str(tmp_path)!r})\n"  # content of its own: uploaded afresh
    (code / "train.py").write_text(source)
    path = tmp_path / "job.json"
    spec = {"user": "ada", "machine_ids": ["g2-standard-4"], "command": ["python", "train.py"]}
    path.write_text(json.dumps({**spec, "code_dir": "code"}))

    assert cli(["submit", str(path), "--json"]) == 0

    out, err = capsys.readouterr()
    shown = json.loads(out)
    [message] = published(submissions)
    assert re.fullmatch(r"j[0-9a-f]{12}", shown["job_id"])
    [upload] = shown["uploads"]
    assert upload["target"] == message["code_uri"] and upload["files"] == 1
    assert upload["written"] == 1 and upload["bytes"] == len(source)
    assert shown["recorded"] is None and shown["topic"].endswith("spotline-submit")
    assert "code: " in err and "uploaded 1 file(s)" in err


# -- logs ---------------------------------------------------------------------


def test_logs_in_the_cloud_come_from_cloud_logging(
    project: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No compute endpoint: a deployed project, whose VMs log to Cloud Logging."""
    api = LoggingDouble(
        [
            an_entry("one", 1, "2026-11-21T12:00:03Z", "epoch 1/2"),
            an_entry("one", 1, "2026-11-21T12:00:01Z", "resumed at step 0"),
            an_entry("one", 1, "2026-11-21T12:00:05Z", "stopped at step 7"),
            an_entry("one", 2, "2026-11-21T12:01:00Z", "resumed at step 7", instance_id="2"),
            an_entry("two", 1, "2026-11-21T12:00:02Z", "another job's line"),
        ]
    )
    service = HttpService(api).start()
    monkeypatch.setenv("SPOTLINE_LOGGING_ENDPOINT", service.endpoint)
    started = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    attempts = [
        AttemptRecord(
            attempt=n,
            instance=f"sl-one-a{n}",
            zone="us-central1-a",
            machine_id="g2-standard-4",
            started_at=started + timedelta(minutes=n - 1),
            outcome="preempted" if n == 1 else None,
            logs_query=logs_query([str(n)], "one", n),
        )
        for n in (1, 2)
    ]
    FirestoreStore(project).create_job(
        a_job("one", "ada", 3, JobStatus.TRAINING, attempts=attempts)
    )
    try:
        assert cli(["logs", "one"]) == 0
        out = capsys.readouterr().out
        assert cli(["logs", "one", "--attempt", "2", "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
    finally:
        service.stop()

    assert out.splitlines() == [
        "== attempt 1 on sl-one-a1 (preempted)",
        "resumed at step 0",
        "epoch 1/2",
        "stopped at step 7",
        "== attempt 2 on sl-one-a2 (running)",
        "resumed at step 7",
    ]
    assert shown == [
        {
            "attempt": 2,
            "node": 0,
            "instance": "sl-one-a2",
            "at": "2026-11-21T12:01:00+00:00",
            "message": "resumed at step 7",
        }
    ]
    [first, *_] = api.requests_to("POST", "/entries:list")
    assert first.body["resourceNames"] == [f"projects/{project}"]
    # The attempt's own query, bounded by when it started (else the client
    # library adds "the last 24 hours", and an older job's logs look empty).
    assert first.body["filter"].startswith(f"({attempts[0].logs_query}) AND timestamp>=")


def test_logs_say_why_cloud_logging_cannot_be_read(
    project: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    service = HttpService(LoggingDouble([], denied=True)).start()
    monkeypatch.setenv("SPOTLINE_LOGGING_ENDPOINT", service.endpoint)
    attempt = AttemptRecord(
        attempt=1,
        instance="sl-one-a1",
        zone="us-central1-a",
        machine_id="g2-standard-4",
        started_at=NOW,
        logs_query=logs_query(["1"], "one", 1),
    )
    FirestoreStore(project).create_job(
        a_job("one", "ada", 3, JobStatus.TRAINING, attempts=[attempt])
    )
    try:
        assert cli(["logs", "one"]) == 1
    finally:
        service.stop()
    err = capsys.readouterr().err
    assert "cannot read Cloud Logging: 403" in err and "logging.logEntries.list" in err
    assert f"gcloud logging read '{attempt.logs_query}' --project {project}" in err
