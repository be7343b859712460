"""A bus that keeps what is published, for tests: ``spotline.shared.ports.bus.Bus`` in memory."""

from __future__ import annotations

import threading

from pydantic import BaseModel

from spotline.shared.settings import TOPICS


class RecordingBus:
    """Records each publish as a ``(topic key, event)`` pair, in order.

    ``published`` holds the pairs and ``attributes`` the attributes of each,
    at the same index. Unknown topic keys raise ``KeyError`` as ``PubsubBus``
    does; message ids are ``"1"``, ``"2"``, ... in publishing order.
    """

    def __init__(self, project: str = "local", topics: dict[str, str] | None = None) -> None:
        self.project = project
        self.topics = topics or dict(TOPICS)
        self.published: list[tuple[str, BaseModel | bytes]] = []
        self.attributes: list[dict[str, str]] = []
        self._lock = threading.Lock()

    def topic_path(self, key: str) -> str:
        return f"projects/{self.project}/topics/{self.topics[key]}"

    def publish(
        self, key: str, event: BaseModel | bytes, timeout_s: float = 30.0, **attributes: str
    ) -> str:
        self.topic_path(key)  # an unknown key fails here, as it does on Pub/Sub
        # A copy: the record shows the event as it was published.
        kept = event if isinstance(event, bytes) else event.model_copy(deep=True)
        with self._lock:
            self.published.append((key, kept))
            self.attributes.append(dict(attributes))
            return str(len(self.published))

    def events(self, key: str) -> list[BaseModel | bytes]:
        """What was published to ``key``, in order."""
        with self._lock:
            return [event for topic, event in self.published if topic == key]
