"""The per-user mode on the whole local stack (`spotline up --user-topics`):
each user's own topics reach the functions through push subscriptions whose
path names the topic, as deploy sets them up in a project; the CLI publishes on
them, and each user's VMs publish their events on that user's own event
topics (the functions refuse them anywhere else in this mode, so a job that
trains to its end got there through them); a cancel or submit on anyone
else's or the shared topic changes nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.localstack.stack import LocalStack, StackOptions
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.pubsub_bus import PubsubBus
from spotline.shared.contract.events import CancelRequest
from spotline.shared.domain.states import JobStatus
from spotline.shared.topics import topics_for, vm_topics_for
from tests.e2e.test_e2e_recovery import vms_of
from tests.event_tokens import assignments_sent

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]
USERS = ("alice", "bob")
T = TypeVar("T")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    workdir = tmp_path_factory.mktemp("user-topics")
    options = StackOptions(project="spotline-users", tick_s=2.0, user_topics=USERS)
    with LocalStack(workdir, options) as running:
        yield running


def eventually(check: Callable[[], T | None], timeout_s: float = 20.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            assert found, "not within the time"
            return found
        time.sleep(0.2)


def test_only_the_owners_own_topic_cancels_their_job(
    stack: LocalStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "job.json"
    spec.write_text(
        json.dumps(
            {
                "user": "alice",
                "job_id": "alices-job",
                "machine_ids": ["g2-standard-4"],
                "trainer": "digits_mlp",
                "epochs": 50,
                "hyperparameters": {"step_time_s": 0.05},
            }
        )
    )
    workdir = ["--workdir", str(stack.workdir)]
    assert cli([*workdir, "submit", str(spec)]) == 0
    assert "on spotline-submit-u-alice" in capsys.readouterr().out
    store = FirestoreStore(stack.options.project)
    eventually(lambda: vms_of(stack, "alices-job"))
    # Its VM's events arrive only through alice's own event topics in this mode.
    eventually(lambda: (job := store.get_job("alices-job")) and job.epoch >= 1, timeout_s=120)

    request = CancelRequest(job_id="alices-job", reason="bob tries")
    PubsubBus(stack.options.project, topics_for("bob", USERS)).publish("cancel", request)
    PubsubBus(stack.options.project).publish("cancel", request)  # the shared topic
    time.sleep(3)  # both delivered and refused by now (push, ~10 ms each)
    job = store.get_job("alices-job")
    assert job is not None and job.status not in JobStatus.terminal()
    assert vms_of(stack, "alices-job")

    # --wait: returns once the job has ended, following it through listeners.
    assert cli([*workdir, "cancel", "alices-job", "--reason", "alice is done", "--wait"]) == 0
    out = capsys.readouterr().out
    assert "published" in out and "alices-job  CANCELED/CANCELED" in out
    job = store.get_job("alices-job")
    assert job is not None and job.status == JobStatus.CANCELED
    eventually(lambda: not vms_of(stack, "alices-job") or None)


def test_a_submit_on_the_shared_topic_is_rejected(stack: LocalStack) -> None:
    spec = {
        "user": "bob",
        "job_id": "shared",
        "machine_ids": ["g2-standard-4"],
        "trainer": "digits_mlp",
    }
    message_id = PubsubBus(stack.options.project).publish("submit", json.dumps(spec).encode())
    store = FirestoreStore(stack.options.project)
    rejection = eventually(lambda: store.get_rejection(message_id))
    assert "not a user's own submit topic" in rejection.reason
    assert store.get_job("shared") is None


def test_submit_follow_watches_the_job_to_its_end(
    stack: LocalStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "short.json"
    job = {"user": "bob", "job_id": "bobs-job", "machine_ids": ["g2-standard-4"]}
    spec.write_text(json.dumps({**job, "trainer": "digits_mlp", "epochs": 2}))

    code = cli(["--workdir", str(stack.workdir), "submit", str(spec), "--follow"])

    out = capsys.readouterr().out
    assert code == 0, out
    assert "bobs-job  QUEUING/REQUESTING_SERVER" in out
    assert "bobs-job  epoch 2/2" in out
    assert out.rstrip().endswith("bobs-job  COMPLETED/COMPLETED")
    # The VM was told bob's own topics; its boot, epochs and finish came that way.
    assert stack.cloud is not None
    told = [a["topics"] for a in assignments_sent(stack.cloud, "bobs-job")]
    assert told and all(t == vm_topics_for("bob", USERS) for t in told)
