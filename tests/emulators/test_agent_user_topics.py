"""The real agent publishes its VM's events on the topics its assignment
names: in the per-user mode its user's own (``spotline-job-finished-u-alice``),
the only ones its account may publish on, and nothing on the shared ones."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spotline.shared.contract.events import VmBooted
from spotline.shared.topics import vm_topics_for
from tests.emulators.test_agent_failures import Topics
from tests.vm_agent import Vm, next_finished

pytestmark = pytest.mark.emulators
KEYS = ("vm_booted", "epoch_done", "job_finished")


@pytest.fixture
def alices_topics(project: str) -> Iterator[Topics]:
    topics = Topics(project, label="alice")
    for key in KEYS:
        topics.create(key, vm_topics_for("alice", ("alice",))[key])
    yield topics
    topics.close()


def test_the_agent_publishes_on_its_users_own_topics(
    vm: Vm, agent_topics: Topics, alices_topics: Topics
) -> None:
    own = vm_topics_for("alice", ("alice", "bob"))
    vm.boot(vm.assignment("j1", ["/bin/sh", "-c", "echo done"], topics=own))

    finished = next_finished(alices_topics)
    assert (finished.job_id, finished.exit_code) == ("j1", 0), finished.log_tail
    [booted] = alices_topics.pull("vm_booted", 10.0)
    assert VmBooted.model_validate_json(booted).job_id == "j1"
    for key in KEYS:  # nothing on the shared topics
        assert agent_topics.pull(key, 0.5) == [], key
