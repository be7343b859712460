"""Publishing to spotline's Pub/Sub topics."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from pydantic import BaseModel

from shared.config import TOPICS

if TYPE_CHECKING:
    from google.cloud.pubsub_v1 import PublisherClient

_PUBLISH_TIMEOUT_S = 30.0


class Bus:
    """Publishes event models as JSON to the topic named by its key in TOPICS."""

    def __init__(self, project: str, topics: dict[str, str] | None = None) -> None:
        self.project = project
        self.topics = topics or dict(TOPICS)

    @cached_property
    def publisher(self) -> PublisherClient:
        # Imported here: google.cloud.pubsub costs ~0.5 s at cold start.
        from google.cloud.pubsub_v1 import PublisherClient, types

        # Events are few and latency matters more than batching.
        batching = types.BatchSettings(max_messages=10, max_latency=0.005)
        return PublisherClient(batch_settings=batching)

    def topic_path(self, key: str) -> str:
        return f"projects/{self.project}/topics/{self.topics[key]}"

    def publish(self, key: str, event: BaseModel | bytes, **attributes: str) -> str:
        """Publish and wait for the server's message id (raises if it fails)."""
        data = event if isinstance(event, bytes) else event.model_dump_json().encode()
        future = self.publisher.publish(self.topic_path(key), data, **attributes)
        return str(future.result(timeout=_PUBLISH_TIMEOUT_S))
