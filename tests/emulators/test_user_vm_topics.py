"""The per-user mode's VM event topics (SECURITY.md, user vs user): each
user's VMs publish their events on that user's own topics
(``spotline-epoch-done-u-alice``), which IAM lets only that user's VM account
publish on. An event is taken only through its job's user's own topic: one on
bob's topic (or the shared one) about alice's job changes nothing, even with
alice's job's valid token. Through the real functions framework (both
delivery shapes) on the Firestore emulator, with the local cloud's VMs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.contract.events import (
    EpochDone,
    Heartbeat,
    JobFinished,
    SpotPreempted,
    VmBooted,
)
from spotline.shared.domain.vms import JOB_METADATA_KEY
from spotline.shared.topics import user_topic, vm_topics_for
from tests.conftest import SPEC, vm_event
from tests.emulators.test_forged_events import log_entry, state_of
from tests.hostile import log_records

JOB, VM = "joba", "sl-joba-a1"
ALICE = {**SPEC, "user": "alice", "job_id": JOB}


def test_a_users_vm_event_topics_are_their_own() -> None:
    assert user_topic("epoch_done", "alice") == "spotline-epoch-done-u-alice"
    assert vm_topics_for("alice", ("alice", "bob")) == {
        "vm_booted": "spotline-vm-booted-u-alice",
        "epoch_done": "spotline-epoch-done-u-alice",
        "job_finished": "spotline-job-finished-u-alice",
        "spot_preempted": "spotline-spot-preempted-u-alice",
    }
    assert vm_topics_for("carol", ("alice",)) == {}  # not a user of the mode: the shared ones
    assert vm_topics_for("alice", ()) == {}
    with pytest.raises(KeyError):
        user_topic("reaper_tick", "alice")


@pytest.fixture
def per_user(host: LocalCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTLINE_USER_TOPICS", "alice,bob")
    deps.reset()


pytestmark = [pytest.mark.emulators, pytest.mark.usefixtures("per_user")]


def events() -> list[tuple[str, str, Any]]:
    """Every VM event about alice's job, each with its attempt's valid token."""
    ids = {"job_id": JOB, "attempt": 1, "instance": VM}
    return [
        ("on_vm_booted", "vm_booted", vm_event(VmBooted, zone="us-central1-a", **ids)),
        ("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING", **ids)),
        ("on_epoch_done", "epoch_done", vm_event(EpochDone, epoch=3, epochs=3, step=99, **ids)),
        ("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0, **ids)),
        ("on_spot_preempted", "spot_preempted", vm_event(SpotPreempted, step=99, **ids)),
    ]


def test_the_vms_are_told_their_users_own_topics(
    call: Callable[..., Any], host: LocalCloud
) -> None:
    call("submit_job", "submit", ALICE, topic_name=user_topic("submit", "alice"))
    vm = host.get(VM)
    assert vm is not None
    assignment = json.loads(vm["metadata"][JOB_METADATA_KEY])
    assert assignment["topics"] == vm_topics_for("alice", ("alice", "bob"))


@pytest.mark.parametrize("mode", ["push", "binary"])
@pytest.mark.parametrize("whose", ["bob", "shared"])
def test_an_event_about_alices_job_on_another_topic_changes_nothing(
    call: Callable[..., Any],
    host: LocalCloud,
    capsys: pytest.CaptureFixture[str],
    mode: str,
    whose: str,
) -> None:
    call("submit_job", "submit", ALICE, topic_name=user_topic("submit", "alice"))
    before = state_of(host, JOB)
    capsys.readouterr()
    for n, (target, key, event) in enumerate(events()):
        assert event.token  # alice's job's own token: the topic alone refuses it
        topic = user_topic(key, "bob") if whose == "bob" else None
        response = call(target, key, event, message_id=f"x{n}", mode=mode, topic_name=topic)
        assert response.status_code == 200  # acknowledged: redelivery cannot help
    assert state_of(host, JOB) == before
    refused = [
        r for r in log_records(capsys.readouterr().out) if r.get("error_type") == "ForgedEvent"
    ]
    assert len(refused) == len(events())
    for record in refused:
        if whose == "bob":
            assert "bob's own" in record["message"] and "only alice" in record["message"]
        else:
            assert "is not a user's own" in record["message"]


def test_alices_events_on_her_own_topics_are_taken(
    call: Callable[..., Any], host: LocalCloud
) -> None:
    call("submit_job", "submit", ALICE, topic_name=user_topic("submit", "alice"))
    for n, (target, key, event) in enumerate(events()[:3]):
        topic = user_topic(key, "alice")
        assert call(target, key, event, message_id=f"a{n}", topic_name=topic).status_code == 200
    job = state_of(host, JOB)["job"]
    assert (job["substatus"], job["epoch"]) == ("TRAINING", 3)
    target, key, notice = events()[-1]  # the agent's preemption report
    topic = user_topic(key, "alice")
    assert call(target, key, notice, message_id="p", topic_name=topic).status_code == 200
    assert state_of(host, JOB)["job"]["attempt"] == 2


def test_a_preemption_log_entry_is_taken_only_on_the_shared_topic(
    call: Callable[..., Any], host: LocalCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the log sink's writer publishes on the shared preempted topic in
    this mode; an entry on a user's topic was written by a VM."""
    call("submit_job", "submit", ALICE, topic_name=user_topic("submit", "alice"))
    vm = host.get(VM)
    assert vm is not None
    entry = log_entry(VM, str(vm["id"]), zone=vm["zone"].rsplit("/", 1)[-1])
    before = state_of(host, JOB)
    capsys.readouterr()
    topic = user_topic("spot_preempted", "bob")
    assert call("on_spot_preempted", "spot_preempted", entry, topic_name=topic).status_code == 200
    assert state_of(host, JOB) == before
    assert "log entry" in capsys.readouterr().out
