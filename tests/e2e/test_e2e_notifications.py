"""State-change notifications on the whole local stack: a job submitted,
preempted, resumed and completed; a subscriber of spotline-job-events on the
Pub/Sub emulator and the job's webhook (a receiver on 127.0.0.1) each see
every change, in order by sequence, copies with the same event id."""

from __future__ import annotations

import json
import time
from itertools import pairwise
from typing import Any

import pytest
from google.pubsub_v1 import SubscriberClient

from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localcloud.chaos_client import ChaosClient
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.job_events import JobEvent
from spotline.shared.domain.states import JobStatus
from spotline.shared.topics import TOPICS
from tests.e2e.test_e2e_recovery import once, submit
from tests.emulators.test_webhook import Receiver

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]


def pull_all(subscriber: SubscriberClient, subscription: str, want: int) -> list[JobEvent]:
    """Every message until ``want`` distinct events came (or 30 s), acked."""
    got: list[JobEvent] = []
    deadline = time.monotonic() + 30
    while len({e.event_id for e in got}) < want and time.monotonic() < deadline:
        answer = subscriber.pull(subscription=subscription, max_messages=100, timeout=5)
        for received in answer.received_messages:
            event = JobEvent.model_validate_json(received.message.data)
            assert received.message.attributes["event_id"] == event.event_id
            got.append(event)
        if answer.received_messages:
            ids = [m.ack_id for m in answer.received_messages]
            subscriber.acknowledge(subscription=subscription, ack_ids=ids)
        else:
            time.sleep(0.2)
    return got


def by_sequence(events: list[Any]) -> list[JobEvent]:
    """One event per id, in sequence order; copies must be the same event."""
    first: dict[str, JobEvent] = {}
    for event in events:
        kept = first.setdefault(event.event_id, event)
        assert kept == event, f"two different events {event.event_id}"
    return sorted(first.values(), key=lambda e: e.sequence)


def test_every_state_change_reaches_a_subscriber_and_the_webhook(
    local_stack: LocalStack,
) -> None:
    assert local_stack.cloud is not None
    project = local_stack.options.project
    subscriber = SubscriberClient()
    subscription = f"projects/{project}/subscriptions/test-job-events-{time.monotonic_ns()}"
    subscriber.create_subscription(
        name=subscription, topic=f"projects/{project}/topics/{TOPICS['job_events']}"
    )
    receiver = Receiver()
    try:
        job_id = submit(local_stack, epochs=3, webhook_url=receiver.url)
        chaos = ChaosClient(local_stack.cloud.endpoint, project)
        preempt = once(
            lambda job: chaos.preempt(job.zone or "", job.instance or "", 5.0),
            when=lambda job: job.attempt == 1 and job.epoch >= 1 and bool(job.zone),
        )
        store = FirestoreStore(project)
        job = wait_for_job(store, job_id, 180, echo=False, on_update=preempt)
        assert job.status == JobStatus.COMPLETED, job.error
        assert (job.attempt, job.preemptions) == (2, 1)

        pulled = pull_all(subscriber, subscription, job.event_sequence)
        events = by_sequence([e for e in pulled if e.job_id == job_id])
        deadline = time.monotonic() + 30
        while len({b["event_id"] for _, b in receiver.posts}) < job.event_sequence:
            assert time.monotonic() < deadline, f"webhook got {len(receiver.posts)}"
            time.sleep(0.2)
        posted = by_sequence([JobEvent.model_validate(body) for _, body in receiver.posts])
    finally:
        receiver.close()
        subscriber.delete_subscription(subscription=subscription)

    assert [e.sequence for e in events] == list(range(1, job.event_sequence + 1))
    assert posted == events  # the webhook got the same events
    # Each event follows the one before it: a chain from submission to the end.
    assert events[0].previous_substatus is None and events[0].reason == "submitted"
    for before, after in pairwise(events):
        assert (after.previous_status, after.previous_substatus) == (
            before.status,
            before.substatus,
        )
    path = [(e.attempt, e.substatus) for e in events]
    assert (1, "PREEMPTED") in path and (2, "REQUESTING_SERVER") in path
    assert path.index((1, "PREEMPTED")) < path.index((2, "REQUESTING_SERVER"))
    assert (events[-1].status, events[-1].substatus) == ("COMPLETED", "COMPLETED")
    assert events[-1].cost_usd == pytest.approx(job.cost_usd, abs=0.01)
    assert json.loads(events[-1].model_dump_json())["schema_version"] == 1
    assert job_id not in {j.job_id for j in store.unpublished_jobs()}
