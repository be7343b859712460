"""Job state-change events: written to the job's outbox in the write that
moves it, published after that write commits, never lost to a crash in
between (``spotline.functions.ops.outbox``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from spotline.functions.deps import Deps
from spotline.functions.ops.jobs import cancel
from spotline.functions.ops.outbox import publish_unpublished
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.adapters.recording_bus import RecordingBus
from spotline.shared.domain.job_events import JobEvent
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.settings import TOPICS, Settings
from tests.documents import T0, job
from tests.faults import Fault, FaultyStore
from tests.replay import Crash


def world(bus: RecordingBus | None = None) -> tuple[Deps, InMemoryStore, RecordingBus, Fault]:
    memory, fault, bus = InMemoryStore(), Fault(), bus or RecordingBus("events")
    deps = Deps(Settings(project="events"), store=FaultyStore(memory, fault), bus=bus)
    return deps, memory, bus, fault


def events(bus: RecordingBus) -> list[JobEvent]:
    return [e for e in bus.events("job_events") if isinstance(e, JobEvent)]


def queued_job(deps: Deps) -> None:
    deps.store.create_job(
        job(substatus=JobSubstatus.WAITING_FOR_CAPACITY, status=JobStatus.QUEUING)
    )


def test_a_submitted_job_publishes_its_first_event_after_the_create() -> None:
    deps, memory, bus, _ = world()
    queued_job(deps)
    [first] = events(bus)
    assert (first.event_id, first.sequence, first.previous_substatus) == ("job1/1", 1, None)
    assert (first.status, first.substatus, first.reason) == (
        "QUEUING",
        "REQUESTING_SERVER",
        "submitted",
    )
    stored = memory.get_job("job1")
    assert stored is not None and stored.pending_events == [] and stored.outbox == "empty"


def test_a_crash_between_the_write_and_the_publish_loses_no_event() -> None:
    deps, memory, bus, fault = world()
    queued_job(deps)
    fault.arm(1, after=True)  # cancel's first call: the update, which goes through
    with pytest.raises(Crash, match="update_job"):
        cancel(deps, "job1", "not needed", T0 + timedelta(seconds=5))
    stored = memory.get_job("job1")
    assert stored is not None and stored.status == JobStatus.CANCELED
    assert [e.sequence for e in events(bus)] == [1]  # the function died before publishing
    assert [e.substatus for e in stored.pending_events] == ["CANCELED"]
    assert [j.job_id for j in memory.unpublished_jobs()] == ["job1"]

    assert publish_unpublished(deps.store, deps.bus) == 1  # the reaper's tick

    canceled = events(bus)[-1]
    assert (canceled.event_id, canceled.previous_substatus) == ("job1/2", "WAITING_FOR_CAPACITY")
    assert (canceled.status, canceled.error) == ("CANCELED", "not needed")
    assert memory.unpublished_jobs() == []
    assert publish_unpublished(deps.store, deps.bus) == 0  # nothing twice


def test_a_redelivery_after_the_crash_publishes_the_left_event_once_more_at_most() -> None:
    deps, memory, bus, fault = world()
    queued_job(deps)
    fault.arm(1, after=True)
    with pytest.raises(Crash):
        cancel(deps, "job1", "not needed", T0 + timedelta(seconds=5))
    cancel(deps, "job1", "not needed", T0 + timedelta(seconds=6))  # Pub/Sub redelivers
    assert [e.event_id for e in events(bus)] == ["job1/1", "job1/2"]
    assert memory.unpublished_jobs() == []


def test_a_failed_publish_keeps_the_transition_and_the_event() -> None:
    no_topic = {key: name for key, name in TOPICS.items() if key != "job_events"}
    deps, memory, _, _ = world(RecordingBus("events", topics=no_topic))
    queued_job(deps)
    cancel(deps, "job1", "not needed", T0 + timedelta(seconds=5))  # does not raise
    stored = memory.get_job("job1")
    assert stored is not None and stored.status == JobStatus.CANCELED
    assert [e.sequence for e in stored.pending_events] == [1, 2]  # in order, none lost
    later = RecordingBus("events")
    assert publish_unpublished(deps.store, later) == 2
    assert [e.event_id for e in events(later)] == ["job1/1", "job1/2"]


def test_each_published_event_says_whether_its_job_has_a_webhook() -> None:
    """``notify_webhook`` skips an event whose ``webhook`` attribute is "0"
    without reading the job; the spec (and so the URL) never changes after
    the submission, so the attribute stays true for every event of the job."""
    deps, _, bus, _ = world()
    queued_job(deps)
    hooked = job("job2", substatus=JobSubstatus.WAITING_FOR_CAPACITY, status=JobStatus.QUEUING)
    hooked = hooked.model_copy(
        update={"spec": hooked.spec.model_copy(update={"webhook_url": "https://h.example/x"})}
    )
    deps.store.create_job(hooked)
    cancel(deps, "job2", "not needed", T0 + timedelta(seconds=5))
    sent = [
        (event.event_id, attributes.get("webhook"))
        for (_, event), attributes in zip(bus.published, bus.attributes, strict=True)
        if isinstance(event, JobEvent)
    ]
    assert sent == [("job1/1", "0"), ("job2/1", "1"), ("job2/2", "1")]
