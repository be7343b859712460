"""A request forgets the events it published once per job, not after each
publish (``spotline.functions.ops.outbox.one_request``, which the handlers' wrapper
opens around every invocation): the events a write published leave the
outbox in the job's next write of the same request, or in one write when the
request ends. What a crash, a second drainer or the reaper's tick in the same
request do with events published but not yet forgotten."""

from __future__ import annotations

import base64
import contextvars
import json
from datetime import timedelta

from cloudevents.http import CloudEvent

from spotline.functions import deps as process_deps
from spotline.functions.deps import Deps
from spotline.functions.handlers.submit_job import submit_job
from spotline.functions.ops.jobs import cancel
from spotline.functions.ops.outbox import one_request, publish_unpublished
from spotline.shared.adapters.counting_store import CountingStore
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.adapters.recording_bus import RecordingBus
from spotline.shared.domain.job_events import JobEvent
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.settings import TOPICS, Settings
from tests.documents import T0, job
from tests.faults import Fault, FaultyStore
from tests.replay import Crash

SPEC = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp"}


class FlakyBus(RecordingBus):
    """Fails the first ``failures`` publishes, then records as RecordingBus."""

    def __init__(self, failures: int) -> None:
        super().__init__("outbox")
        self.failures = failures

    def publish(self, key: str, event: object, timeout_s: float = 30.0, **attributes: str) -> str:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("Pub/Sub is unreachable")
        return super().publish(key, event, timeout_s, **attributes)  # type: ignore[arg-type]


def event_ids(bus: RecordingBus) -> list[str]:
    return [e.event_id for e in bus.events("job_events") if isinstance(e, JobEvent)]


def submitted(job_id: str) -> CloudEvent:
    """The submission as Eventarc hands it to ``submit_job``."""
    topic = f"projects/outbox/topics/{TOPICS['submit']}"
    data = json.dumps({**SPEC, "job_id": job_id}).encode()
    message = {
        "data": base64.b64encode(data).decode(),
        "messageId": f"m-{job_id}",
        "publishTime": T0.isoformat().replace("+00:00", "Z"),
    }
    attributes = {
        "id": f"m-{job_id}",
        "source": f"//pubsub.googleapis.com/{topic}",
        "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "specversion": "1.0",
    }
    return CloudEvent(attributes, {"message": message})


def quota_full(store: InMemoryStore) -> None:
    """alice holds her 5 active jobs: a new one waits for quota, with no VM."""
    others = [f"other{n}" for n in range(5)]
    store.update_user("alice", lambda user: user.model_copy(update={"active_jobs": others}))


def installed(deps: Deps) -> None:
    process_deps._current = deps


def test_a_waiting_submission_forgets_its_two_events_in_one_write() -> None:
    """create (event 1), published; the move to WAITING_FOR_QUOTA (event 2)
    also drops event 1; the queue entry; event 2 dropped as the request ends.
    After each publish its own write, this was 5 writes."""
    memory = InMemoryStore()
    quota_full(memory)
    store, bus = CountingStore(memory), RecordingBus("outbox")
    installed(Deps(Settings(project="outbox"), store=store, bus=bus, clock=lambda: T0))
    try:
        submit_job(submitted("job1"))
    finally:
        process_deps.reset()
    stored = memory.get_job("job1")
    assert stored is not None and stored.substatus == JobSubstatus.WAITING_FOR_QUOTA
    assert stored.pending_events == []
    assert event_ids(bus) == ["job1/1", "job1/2"]
    assert store.ops.by_method["update_job.writes"] == 2
    assert (store.ops.writes, store.ops.by_method["create_job.writes"]) == (4, 1)


def test_a_crash_after_the_publish_leaves_the_event_for_the_reaper_to_send_again() -> None:
    """The process dies after event 2 went out, before the request's last
    write would have forgotten it: event 2 stays in the outbox, and the
    reaper publishes a copy of it (the same event_id)."""
    memory, fault, bus = InMemoryStore(), Fault(), RecordingBus("outbox")
    quota_full(memory)
    deps = Deps(
        Settings(project="outbox"), store=FaultyStore(memory, fault), bus=bus, clock=lambda: T0
    )
    installed(deps)
    # create_job, update_user, get_queue, put_queue, update_job (the move to
    # WAITING_FOR_QUOTA, which drops event 1), then the request's last write
    fault.arm(6, after=False)
    try:
        try:
            submit_job(submitted("job1"))
        except Crash as crash:
            assert "update_job" in str(crash)
        else:
            raise AssertionError("the function did not crash")
    finally:
        process_deps.reset()
    stored = memory.get_job("job1")
    assert stored is not None and [e.event_id for e in stored.pending_events] == ["job1/2"]
    assert event_ids(bus) == ["job1/1", "job1/2"]

    assert publish_unpublished(deps.store, deps.bus) == 1
    assert event_ids(bus) == ["job1/1", "job1/2", "job1/2"]
    assert memory.unpublished_jobs() == []


def test_a_failed_publish_is_tried_again_first_so_no_event_overtakes_another() -> None:
    memory, bus = InMemoryStore(), FlakyBus(failures=1)
    deps = Deps(Settings(project="outbox"), store=memory, bus=bus)
    with one_request():
        deps.store.create_job(
            job(status=JobStatus.QUEUING, substatus=JobSubstatus.WAITING_FOR_CAPACITY)
        )
        assert event_ids(bus) == []  # event 1 failed: it stays, unremembered
        cancel(deps, "job1", "not needed", T0 + timedelta(seconds=5))
    assert event_ids(bus) == ["job1/1", "job1/2"]
    stored = memory.get_job("job1")
    assert stored is not None and stored.pending_events == []


def test_the_reaper_in_the_same_request_sends_no_copy_of_what_it_just_published() -> None:
    """The tick places queued jobs (their events published and remembered),
    then drains the outboxes: those events are not published twice, and
    leave the outbox in the drain's write."""
    memory, bus = InMemoryStore(), RecordingBus("outbox")
    store = CountingStore(memory)
    deps = Deps(Settings(project="outbox"), store=store, bus=bus)
    with one_request():
        deps.store.create_job(
            job(status=JobStatus.QUEUING, substatus=JobSubstatus.WAITING_FOR_CAPACITY)
        )
        assert publish_unpublished(deps.store, deps.bus) == 0
        stored = memory.get_job("job1")
        assert stored is not None and stored.pending_events == []
        writes = store.ops.writes
    assert store.ops.writes == writes  # nothing left for the request's end
    assert event_ids(bus) == ["job1/1"]


def test_another_drainer_in_between_makes_a_copy_and_no_event_is_lost() -> None:
    """This request published event 1 and has not forgotten it when another
    process (the reaper) publishes the outbox: a copy of event 1. This
    request's next move folds the forgetting of event 1 (gone already) into
    its write, and forgets event 2 as it ends."""
    memory = InMemoryStore()
    here, there = RecordingBus("outbox"), RecordingBus("outbox")
    deps = Deps(Settings(project="outbox"), store=memory, bus=here)
    reaper = Deps(Settings(project="outbox"), store=memory, bus=there)
    with one_request():
        deps.store.create_job(
            job(status=JobStatus.QUEUING, substatus=JobSubstatus.WAITING_FOR_CAPACITY)
        )
        elsewhere = contextvars.Context()  # another process: no request of ours
        assert elsewhere.run(publish_unpublished, reaper.store, reaper.bus) == 1
        cancel(deps, "job1", "not needed", T0 + timedelta(seconds=5))
        stored = memory.get_job("job1")
        assert stored is not None and [e.sequence for e in stored.pending_events] == [2]
    assert (event_ids(here), event_ids(there)) == (["job1/1", "job1/2"], ["job1/1"])
    stored = memory.get_job("job1")
    assert stored is not None and stored.pending_events == []
