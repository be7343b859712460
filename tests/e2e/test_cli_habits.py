"""The CLI habits scripts rely on: `--version`, a quiet end when the reader of
its output goes away, and `cancel` saying so when there is nothing to cancel."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.exit_codes import Exit
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from tests.documents import instance, job


def test_version_names_the_installed_package(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli(["--version"])
    assert ended.value.code == 0
    assert capsys.readouterr().out.startswith("spotline 0.")


def test_preempt_help_says_what_the_notice_is_and_its_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli(["preempt", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--notice-s NOTICE_S seconds from the notice to the kill" in shown
    assert "default: 30.0" in shown


def test_a_reader_that_goes_away_ends_the_output_quietly() -> None:
    """`spotline schema | head`: the pipe is closed before the CLI writes."""
    process = subprocess.Popen(
        [sys.executable, "-m", "spotline.infra.cli.commands", "schema"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # long before the CLI's imports are done
    errors = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141, errors
    assert "Traceback" not in errors and "BrokenPipeError" not in errors


def test_cancel_of_an_unknown_job_fails_and_of_an_ended_one_publishes_nothing(
    project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["cancel", "no-such-job"]) == 1
    assert "no job no-such-job" in capsys.readouterr().err

    store = FirestoreStore(project)
    store.create_job(job("done1", status=JobStatus.COMPLETED, substatus=JobSubstatus.COMPLETED))
    assert cli(["cancel", "done1"]) == 0
    assert "already ended: COMPLETED" in capsys.readouterr().out
    # Several at once: each is answered; one unknown job makes it exit 1.
    assert cli(["cancel", "done1", "no-such-job"]) == 1
    captured = capsys.readouterr()
    assert "already ended: COMPLETED" in captured.out and "no job no-such-job" in captured.err


def test_cancel_json_says_what_became_of_each_job_and_nothing_else_on_stdout(
    project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"projects/{project}/topics/spotline-cancel"
    PublisherClient().create_topic(name=topic)
    subscription = f"projects/{project}/subscriptions/cancels"
    SubscriberClient().create_subscription(name=subscription, topic=topic)
    store = FirestoreStore(project)
    store.create_job(job("live1", status=JobStatus.TRAINING, substatus=JobSubstatus.TRAINING))
    store.create_job(job("done1", status=JobStatus.COMPLETED, substatus=JobSubstatus.COMPLETED))

    code = cli(["cancel", "live1", "done1", "no-such-job", "--json", "--reason", "wrong lr"])

    assert code == Exit.FAILED  # one job is unknown, as without --json
    out, err = capsys.readouterr()
    live, done, unknown = json.loads(out)
    pulled = SubscriberClient().pull(subscription=subscription, max_messages=10, timeout=10)
    [message] = [json.loads(m.message.data) for m in pulled.received_messages]
    assert (message["job_id"], message["reason"]) == ("live1", "wrong lr")
    assert live["result"] == "published" and live["status"] == "TRAINING"
    assert live["message_id"] == pulled.received_messages[0].message.message_id
    assert (done["result"], done["status"], done["message_id"]) == ("ended", "COMPLETED", None)
    assert "already ended" in done["message"]
    assert (unknown["job_id"], unknown["result"], unknown["status"]) == (
        "no-such-job",
        "unknown",
        None,
    )
    assert "no job no-such-job" in unknown["message"] and "no job no-such-job" in err


def test_cancel_json_and_wait_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli(["cancel", "j1", "--json", "--wait"])
    assert ended.value.code == Exit.USAGE
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.e2e
def test_preempt_of_an_ended_job_says_so_in_a_line(
    local_stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    store = FirestoreStore(local_stack.options.project)
    ended = job("ended-a", status=JobStatus.COMPLETED, substatus=JobSubstatus.COMPLETED)
    store.create_job(ended)
    store.create_instance(instance(ended.instance or "", "ended-a", status=InstanceStatus.CLOSED))

    assert cli(["--workdir", str(local_stack.workdir), "preempt", "ended-a"]) == 1

    err = capsys.readouterr().err
    assert "job ended-a has ended (COMPLETED): it has no VM to preempt" in err
    assert "Traceback" not in err


@pytest.mark.e2e
def test_preempt_of_a_vm_that_is_gone_says_so_in_a_line(
    local_stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    store = FirestoreStore(local_stack.options.project)
    store.create_instance(instance("sl-gone-a1", "gone", status=InstanceStatus.EXECUTING))

    assert cli(["--workdir", str(local_stack.workdir), "preempt", "sl-gone-a1"]) == 1

    assert "sl-gone-a1 cannot be preempted:" in capsys.readouterr().err
