"""Who may submit and cancel. In the per-user mode
(``SPOTLINE_USER_TOPICS``) a message acts only when it came through its
publisher's own topic and is about that publisher's job, through the real
functions framework (both delivery shapes) on the Firestore emulator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.identity import publisher, refusal
from spotline.shared.domain.states import JobStatus
from spotline.shared.topics import user_of_topic, user_topic
from tests.conftest import SPEC

SOURCE = "//pubsub.googleapis.com/projects/p/topics/{}"


def test_a_users_topic_names_them_and_no_one_else() -> None:
    assert user_topic("submit", "alice") == "spotline-submit-u-alice"
    assert user_of_topic("cancel", "spotline-cancel-u-bob") == "bob"
    assert user_of_topic("cancel", "spotline-submit-u-bob") is None
    assert user_of_topic("submit", "spotline-submit") is None
    assert user_of_topic("submit", "spotline-submit-u-") is None
    with pytest.raises(KeyError):
        user_topic("reaper_tick", "alice")
    users = ("alice", "bob")
    assert publisher("submit", SOURCE.format("spotline-submit-u-alice"), users) == "alice"
    assert publisher("submit", SOURCE.format("spotline-submit-u-carol"), users) is None
    elsewhere = "//storage.googleapis.com/x/topics/spotline-submit-u-alice"
    assert publisher("submit", elsewhere, users) is None


def test_the_shared_topics_are_obeyed_only_when_no_user_topics_are_set() -> None:
    shared = SOURCE.format("spotline-submit")
    assert refusal("submit", "alice", shared, ()) is None
    assert "own submit topic" in (refusal("submit", "alice", shared, ("alice",)) or "")
    mine = SOURCE.format("spotline-cancel-u-bob")
    assert refusal("cancel", "bob", mine, ("bob",)) is None
    assert refusal("cancel", "alice", mine, ("alice", "bob")) == (
        "bob published on their own cancel topic for a job of alice's: only alice may"
    )


@pytest.fixture
def per_user(host: LocalCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTLINE_USER_TOPICS", "alice,bob")
    deps.reset()


pytestmark = [pytest.mark.emulators, pytest.mark.usefixtures("per_user")]
ALICE = {**SPEC, "user": "alice"}
JOB = "job1"


@pytest.mark.parametrize("mode", ["push", "binary"])
def test_a_submit_on_the_users_own_topic_runs(
    call: Callable[..., Any], host: LocalCloud, project: str, mode: str
) -> None:
    topic = user_topic("submit", "alice")
    assert call("submit_job", "submit", ALICE, mode=mode, topic_name=topic).status_code == 200
    job = FirestoreStore(project).get_job(JOB)
    assert job is not None and job.user == "alice"
    assert len(host.list()) == 1


@pytest.mark.parametrize(
    ("topic", "why"),
    [
        ("spotline-submit-u-bob", "bob published on their own submit topic for user alice"),
        ("spotline-submit", "spotline-submit is not a user's own submit topic"),
        ("spotline-submit-u-mallory", "spotline-submit-u-mallory is not a user's own"),
    ],
)
@pytest.mark.parametrize("mode", ["push", "binary"])
def test_a_submit_for_someone_else_is_rejected_and_creates_nothing(
    call: Callable[..., Any], host: LocalCloud, project: str, topic: str, why: str, mode: str
) -> None:
    for _ in range(2):  # redelivered: still one rejection, nothing made
        response = call("submit_job", "submit", ALICE, message_id="9", mode=mode, topic_name=topic)
        assert response.status_code == 200  # acknowledged: redelivery cannot help
    store = FirestoreStore(project)
    assert store.get_job(JOB) is None and host.list() == []
    rejection = store.get_rejection("9")
    assert rejection is not None and why in rejection.reason


@pytest.mark.parametrize("mode", ["push", "binary"])
def test_a_cancel_of_someone_elses_job_changes_nothing(
    call: Callable[..., Any], host: LocalCloud, project: str, mode: str
) -> None:
    call("submit_job", "submit", ALICE, topic_name=user_topic("submit", "alice"))
    cancel = {"job_id": JOB, "reason": "not yours"}
    for topic in ("spotline-cancel-u-bob", "spotline-cancel"):
        assert call("cancel_job", "cancel", cancel, mode=mode, topic_name=topic).status_code == 200
    job = FirestoreStore(project).get_job(JOB)
    assert job is not None and job.status not in JobStatus.terminal()
    assert len(host.list()) == 1

    mine = user_topic("cancel", "alice")
    assert call("cancel_job", "cancel", cancel, mode=mode, topic_name=mine).status_code == 200
    job = FirestoreStore(project).get_job(JOB)
    assert job is not None and job.status == JobStatus.CANCELED
    assert host.list() == []


def test_a_cancel_of_an_unknown_job_on_a_users_topic_is_dropped(
    call: Callable[..., Any], project: str
) -> None:
    cancel = {"job_id": "nosuchjob"}
    topic = user_topic("cancel", "bob")
    assert call("cancel_job", "cancel", cancel, topic_name=topic).status_code == 200
    assert FirestoreStore(project).get_job("nosuchjob") is None


@pytest.mark.parametrize("mode", ["push", "binary"])
def test_a_submit_naming_another_users_secret_is_rejected_and_creates_nothing(
    call: Callable[..., Any], host: LocalCloud, project: str, mode: str
) -> None:
    # Bob, on his own topic, names alice's secret: his VMs could not read it
    # (IAM), and spotline refuses it before a VM is paid for.
    bobs = {**SPEC, "user": "bob", "env": {"HF_TOKEN": "sm://spotline-u-alice_HF_TOKEN"}}
    topic = user_topic("submit", "bob")
    response = call("submit_job", "submit", bobs, message_id="7", mode=mode, topic_name=topic)
    assert response.status_code == 200
    store = FirestoreStore(project)
    assert store.get_job(JOB) is None and host.list() == []
    rejection = store.get_rejection("7")
    assert rejection is not None
    assert "env.HF_TOKEN: sm://spotline-u-alice_HF_TOKEN is not one of bob's secrets" in (
        rejection.reason
    )
    assert "spotline-u-bob_" in rejection.reason
