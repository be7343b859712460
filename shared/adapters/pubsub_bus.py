"""Publishing to spotline's Pub/Sub topics: ``spotline.shared.ports.bus.Bus`` on Pub/Sub."""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING

from pydantic import BaseModel

from spotline.shared.settings import TOPICS

if TYPE_CHECKING:
    from google.api_core.retry import Retry
    from google.pubsub_v1 import PublisherClient

_PUBLISH_TIMEOUT_S = 30.0


def _retry_policy(timeout_s: float) -> Retry:
    """Retry the transient failures (the Publish method's retryable codes)
    with backoff, giving up ``timeout_s`` after the first attempt."""
    from spotline.shared.retries import PUBLISH, transient_api_error

    return replace(PUBLISH, deadline_s=timeout_s).retry(transient_api_error)


class PubsubBus:
    """Publishes event models as JSON to the topic named by its key in TOPICS."""

    def __init__(self, project: str, topics: dict[str, str] | None = None) -> None:
        self.project = project
        self.topics = topics or dict(TOPICS)

    @cached_property
    def publisher(self) -> PublisherClient:
        # The generated client, not google.cloud.pubsub's batching one: every
        # publish here waits for its message id, so batching only added two
        # threads and a 5 ms wait to each event (and twice the CPU: the VM
        # agent publishes one per epoch). It honours PUBSUB_EMULATOR_HOST too.
        # Imported here: the Pub/Sub client costs ~0.5 s at cold start.
        from google.pubsub_v1 import PublisherClient

        return PublisherClient()

    def topic_path(self, key: str) -> str:
        return f"projects/{self.project}/topics/{self.topics[key]}"

    def publish(
        self,
        key: str,
        event: BaseModel | bytes,
        timeout_s: float = _PUBLISH_TIMEOUT_S,
        **attributes: str,
    ) -> str:
        """Publish in one call; the server's message id.

        Transient failures are retried, and the whole call (every attempt and
        the waits between them) ends within ``timeout_s``.

        Raises:
            google.api_core.exceptions.GoogleAPIError: a permanent failure, or
                the transient ones outlasted ``timeout_s`` (RetryError).
        """
        from google.pubsub_v1 import PubsubMessage

        data = event if isinstance(event, bytes) else event.model_dump_json().encode()
        response = self.publisher.publish(
            topic=self.topic_path(key),
            messages=[PubsubMessage(data=data, attributes=attributes)],
            retry=_retry_policy(timeout_s),
            timeout=timeout_s,
        )
        return str(response.message_ids[0])
