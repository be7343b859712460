"""The bus port: publishing spotline's events, and its contract.

Two adapters implement it: ``PubsubBus`` (Pub/Sub, in production and on the
emulator) and ``RecordingBus`` (keeps what was published, for tests).

Contract, for every adapter:

* ``publish(key, event, timeout_s, **attributes)`` publishes ``event`` (a
  pydantic model, sent as its JSON, or raw bytes) with the string
  ``attributes`` to the topic named by ``key`` in the topology (``"submit"``,
  ``"spot_preempted"``, ...), and returns the message id once the topic holds
  the message. An unknown key raises ``KeyError``. Transient failures are
  retried until ``timeout_s`` has passed; then, or on a permanent failure, it
  raises (``google.api_core.exceptions.GoogleAPIError`` for ``PubsubBus``).
  Delivery is at least once: consumers must be idempotent.
* ``topic_path(key)`` names the topic (``projects/{project}/topics/{name}``),
  for log lines and errors.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel


class Bus(Protocol):
    def publish(
        self, key: str, event: BaseModel | bytes, timeout_s: float = ..., **attributes: str
    ) -> str: ...

    def topic_path(self, key: str) -> str: ...
