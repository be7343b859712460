"""The bus port's contract (shared/ports/bus.py), for both adapters.

``PubsubBus`` runs against the real Pub/Sub emulator (skipped, loudly, where
the Google Cloud CLI is missing: see conftest.py); ``RecordingBus`` is what
tests of the functions use instead, so it must publish the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from spotline.shared.adapters.pubsub_bus import PubsubBus
from spotline.shared.adapters.recording_bus import RecordingBus
from spotline.shared.contract.events import ReaperTick
from spotline.shared.ports.bus import Bus
from spotline.shared.settings import TOPICS

Received = set[tuple[bytes, tuple[tuple[str, str], ...]]]


@dataclass
class Backend:
    bus: Bus
    project: str
    # Every (data, attributes) that reached the reaper-tick topic.
    received: Callable[[], Received]


def _recording() -> Backend:
    bus = RecordingBus("local")

    def received() -> Received:
        return {
            (_data(event), tuple(sorted(attributes.items())))
            for (key, event), attributes in zip(bus.published, bus.attributes, strict=True)
            if key == "reaper_tick"
        }

    return Backend(bus, "local", received)


def _pubsub(project: str) -> Backend:
    from google.api_core.exceptions import DeadlineExceeded
    from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

    publisher, subscriber = PublisherClient(), SubscriberClient()
    topic = publisher.topic_path(project, TOPICS["reaper_tick"])
    publisher.create_topic(name=topic)
    subscription = subscriber.subscription_path(project, "bus-contract")
    subscriber.create_subscription(name=subscription, topic=topic)

    def received() -> Received:
        got: Received = set()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(got) < 2:
            try:
                response = subscriber.pull(subscription=subscription, max_messages=10, timeout=2)
            except DeadlineExceeded:
                continue
            for message in response.received_messages:
                attributes = tuple(sorted(dict(message.message.attributes).items()))
                got.add((message.message.data, attributes))
            if response.received_messages:
                subscriber.acknowledge(
                    subscription=subscription,
                    ack_ids=[message.ack_id for message in response.received_messages],
                )
        return got

    return Backend(PubsubBus(project), project, received)


def _data(event: BaseModel | bytes) -> bytes:
    return event if isinstance(event, bytes) else event.model_dump_json().encode()


@pytest.fixture(params=["recording", pytest.param("pubsub", marks=pytest.mark.emulators)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "recording":
        yield _recording()
    else:
        yield _pubsub(request.getfixturevalue("project"))


def test_events_and_bytes_reach_the_topic_with_their_attributes(backend: Backend) -> None:
    tick = ReaperTick(sent_at=datetime(2026, 11, 21, 12, 0, tzinfo=UTC))
    first = backend.bus.publish("reaper_tick", tick, origin="test")
    second = backend.bus.publish("reaper_tick", b'{"raw": true}', timeout_s=5.0)
    assert isinstance(first, str) and isinstance(second, str) and first != second
    assert backend.received() == {
        (tick.model_dump_json().encode(), (("origin", "test"),)),
        (b'{"raw": true}', ()),
    }


def test_topics_are_named_by_key(backend: Backend) -> None:
    path = backend.bus.topic_path("submit")
    assert path == f"projects/{backend.project}/topics/spotline-submit"
    with pytest.raises(KeyError):
        backend.bus.publish("no_such_topic", ReaperTick())
