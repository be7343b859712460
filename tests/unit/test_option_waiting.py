"""The waiting rule: ``machine_ids[0]`` is asked for (retried while it
has no capacity) for up to ``wait_request_s``, then ``machine_ids[1]``, and
so on; after ``wait_total_s`` in all the job is CANCELED, naming what it
asked for. Duplicate submissions and reaper ticks in between change nothing.

The submit handler and the reaper's sweep run on the in-memory store, at
times the test chooses; VMs come from the local cloud (records, no
processes) through GceCompute, which refuses one machine type by capacity
rule. Through the functions framework and Firestore:
tests/emulators/test_option_waiting_wire.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message
from spotline.functions.handlers.submit_job import submit_job
from spotline.functions.ops.recovery import recover
from spotline.functions.ops.sweep import sweep
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.settings import Settings

FIRST, SECOND = "g2-standard-4", "n1-standard-8-t4.od"
ZONES = ("us-central1-a", "us-central1-b")
SPEC: dict[str, Any] = {
    "user": "alice",
    "machine_ids": [FIRST, SECOND],
    "trainer": "digits_mlp",
    "job_id": "job1",
    "wait_request_s": 60,
}
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)

submit: Callable[[Message, Deps], None] = submit_job.__wrapped__  # type: ignore[attr-defined]


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


class World:
    """One store and one local cloud; each call runs at the time it names."""

    def __init__(self, cloud: LocalCloud) -> None:
        self.cloud = cloud
        self.store = InMemoryStore()
        self.settings = Settings(
            project=cloud.project, compute_endpoint=cloud.endpoint, zones=ZONES
        )

    def deps(self, at: datetime) -> Deps:
        return Deps(self.settings, store=self.store, clock=lambda: at)

    def submit(self, at: datetime, spec: dict[str, Any] | None = None) -> None:
        data = json.dumps(spec or SPEC).encode()
        submit(Message(data=data, message_id="m1", publish_time=NOW), self.deps(at))

    def tick(self, at: datetime) -> None:
        sweep(self.deps(at), at)

    def job(self) -> JobDoc:
        found = self.store.get_job("job1")
        assert found is not None
        return found

    def asked(self) -> list[str]:
        """The machine type of every insert sent, in order (bulk inserts too)."""
        types = []
        for sent in self.cloud.requests_to("POST", "/instances"):
            assert sent.body is not None
            types.append(str(sent.body["machineType"]).rsplit("/", 1)[-1])
        for sent in self.cloud.requests_to("POST", "/bulkInsert"):
            assert sent.body is not None
            types.append(str(sent.body["instanceProperties"]["machineType"]))
        return types


def full(cloud: LocalCloud, machine_type: str) -> None:
    for zone in ZONES:
        cloud.capacity_errors[(machine_type, zone)] = "ZONE_RESOURCE_POOL_EXHAUSTED"


def test_the_first_option_is_asked_for_until_wait_request_s_then_the_next(
    cloud: LocalCloud,
) -> None:
    world = World(cloud)
    full(cloud, "g2-standard-4")  # the second option has room all along
    world.submit(NOW)
    assert world.job().substatus == JobSubstatus.WAITING_FOR_CAPACITY
    assert world.asked() == ["g2-standard-4"] * 2  # both zones of the first option only
    entry = world.store.get_queue("job1")
    assert entry is not None and entry.waiting_since == NOW
    # Retries within the first option's minute: a redelivered submission, and
    # the reaper's ticks (twice at one moment, as Scheduler may fire).
    world.tick(entry.not_before)
    world.submit(later(20))
    world.tick(later(30))
    world.tick(later(30))
    assert world.job().substatus == JobSubstatus.WAITING_FOR_CAPACITY
    assert set(world.asked()) == {"g2-standard-4"}
    # The retry lands on the window's end, however long the backoff grew.
    entry = world.store.get_queue("job1")
    assert entry is not None and entry.not_before <= later(60)
    world.tick(later(60))
    world.tick(later(60))  # a duplicate tick finds the job placed
    placed = world.job()
    assert placed.substatus == JobSubstatus.CONNECTING_SERVER, placed.history[-1]
    assert placed.machine_id == SECOND
    assert world.asked()[-1] == "n1-standard-8" and world.asked().count("n1-standard-8") == 1
    assert world.store.get_queue("job1") is None and len(cloud.list()) == 1


def test_the_job_is_canceled_when_the_total_runs_out_naming_what_it_asked_for(
    cloud: LocalCloud,
) -> None:
    world = World(cloud)
    full(cloud, "g2-standard-4")
    full(cloud, "n1-standard-8")
    world.submit(NOW)
    for second in (15, 45, 60, 60, 100):
        world.tick(later(second))
    assert world.job().status == JobStatus.QUEUING
    asked = world.asked()
    assert asked.index("n1-standard-8") == asked.count("g2-standard-4")  # in turn, not mixed
    entry = world.store.get_queue("job1")
    assert entry is not None and entry.not_before <= later(120)  # the default total: 2 x 60 s
    world.tick(later(120))
    ended = world.job()
    assert (ended.status, ended.substatus) == (JobStatus.CANCELED, JobSubstatus.CANCELED)
    assert ended.error is not None
    assert "wait_request_s=60 s per machine option x 2 = 120 s" in ended.error
    assert f"asked for {FIRST}, {SECOND}" in ended.error
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in ended.error
    assert world.store.get_queue("job1") is None and cloud.list() == []
    user = world.store.get_user("alice")
    assert user is not None and (user.active_jobs, user.active_instances) == ([], [])


def test_wait_total_s_past_the_options_asks_for_them_in_turn_again(cloud: LocalCloud) -> None:
    world = World(cloud)
    full(cloud, "g2-standard-4")
    full(cloud, "n1-standard-8")
    world.submit(NOW, {**SPEC, "wait_total_s": 300})
    for second in (60, 120, 180):
        world.tick(later(second))
    assert world.asked()[-2:] == ["n1-standard-8"] * 2  # 180 s: the second option's turn again
    assert world.job().status == JobStatus.QUEUING
    world.tick(later(300))
    ended = world.job()
    assert ended.status == JobStatus.CANCELED and ended.error is not None
    assert "wait_total_s=300 s (wait_request_s=60 s per machine option)" in ended.error


def test_a_new_attempt_starts_the_option_clocks_again(cloud: LocalCloud) -> None:
    world = World(cloud)
    full(cloud, "g2-standard-4")
    world.submit(NOW)
    world.tick(later(60))
    placed = world.job()
    assert placed.machine_id == SECOND
    instance = world.store.get_instance("sl-job1-a1")
    assert instance is not None
    # Preempted long after the job began to wait: its first attempt's clock
    # would be out (2 x 60 s), the new attempt's starts now, at the first option.
    before = len(world.asked())
    recover(world.deps(later(500)), instance, JobSubstatus.PREEMPTED, later(500), note="preempted")
    waiting = world.job()
    assert (waiting.attempt, waiting.substatus) == (2, JobSubstatus.WAITING_FOR_CAPACITY)
    assert world.asked()[before:] == ["g2-standard-4"] * 2
    entry = world.store.get_queue("job1")
    assert entry is not None and (entry.attempt, entry.waiting_since) == (2, later(500))
    world.tick(later(530))
    assert world.job().substatus == JobSubstatus.WAITING_FOR_CAPACITY  # not CANCELED
    world.tick(later(560))
    assert world.job().substatus == JobSubstatus.CONNECTING_SERVER
    assert world.job().machine_id == SECOND


def test_wait_request_s_zero_moves_on_at_once(cloud: LocalCloud) -> None:
    world = World(cloud)
    full(cloud, "g2-standard-4")
    world.submit(NOW, {**SPEC, "wait_request_s": 0})
    assert world.job().machine_id == SECOND
    assert world.asked() == ["g2-standard-4", "g2-standard-4", "n1-standard-8"]


def test_a_gang_waits_for_its_first_option_too(cloud: LocalCloud) -> None:
    world = World(cloud)
    full(cloud, "g2-standard-4")
    world.submit(NOW, {**SPEC, "nodes": 2})
    assert world.job().substatus == JobSubstatus.WAITING_FOR_CAPACITY
    assert set(world.asked()) == {"g2-standard-4"}
    world.tick(later(60))
    placed = world.job()
    assert placed.machine_id == SECOND and placed.nodes == ["sl-job1-a1-n0", "sl-job1-a1-n1"]
