"""What tells an open page that something changed: Firestore listeners held by
the server, one set per topic, shared by every page that shows it.

Topics: ``jobs`` (the newest jobs, as the jobs table shows them),
``instances`` (the newest instances), ``job/ID`` (one job's document and its
epochs). A listener's callback only puts the topic on each subscriber's queue;
the page then re-fetches the server-rendered fragment. Nothing polls: the
listeners are Firestore's own push (``on_snapshot``), started when the first
page asks for a topic and stopped when the last one goes.

Every listener reports what is there when it starts, so a page re-reads once
right after it connects: that covers a change between the page's render and
its subscription.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from typing import Any

from spotline.shared.adapters.firestore_store import EPOCHS, INSTANCES, JOBS, FirestoreStore
from spotline.shared.domain.bounds import JOB_ID_PATTERN

JOB_TOPIC = "job/"
_CLOSED = ""  # put on every queue when the hub closes: the streams end


class Subscription:
    """One page's topics. A context manager: leaving it unsubscribes."""

    def __init__(self, hub: Hub, topics: list[str]) -> None:
        self.hub = hub
        self.topics = topics
        self.changes: queue.Queue[str] = queue.Queue()
        self.closed = False
        # Topics told and not yet taken: a burst of writes (an epoch, the job's
        # progress, its instance) makes the page re-read once, not once each.
        self._pending: set[str] = set()
        self._lock = threading.Lock()

    def tell(self, topic: str) -> None:
        with self._lock:
            if topic in self._pending:
                return
            self._pending.add(topic)
        self.changes.put(topic)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *_: object) -> None:
        self.hub.unsubscribe(self)

    def next(self, timeout_s: float) -> str | None:
        """The next topic that changed; None when none did within ``timeout_s``
        (or the hub closed: then ``closed`` is set)."""
        try:
            topic = self.changes.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if topic == _CLOSED:
            self.closed = True
            return None
        with self._lock:
            self._pending.discard(topic)
        return topic


class Hub:
    """The listeners of every topic some open page shows. A context manager:
    leaving it stops them all and ends every stream."""

    def __init__(self, store: FirestoreStore, jobs_shown: int = 50) -> None:
        self.store = store
        self.jobs_shown = jobs_shown
        self._lock = threading.Lock()
        self._subscribers: dict[str, list[Subscription]] = {}
        self._watches: dict[str, list[Any]] = {}

    def __enter__(self) -> Hub:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def subscribe(self, topics: Iterable[str]) -> Subscription:
        """Raises ValueError naming a topic that is not one of the hub's."""
        wanted = list(dict.fromkeys(topics))
        for topic in wanted:
            check_topic(topic)
        subscription = Subscription(self, wanted)
        with self._lock:
            for topic in wanted:
                self._subscribers.setdefault(topic, []).append(subscription)
                if topic not in self._watches:
                    self._watches[topic] = self._listen(topic)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        stopping = []
        with self._lock:
            for topic in subscription.topics:
                left = [s for s in self._subscribers.get(topic, []) if s is not subscription]
                self._subscribers[topic] = left
                if not left:
                    self._subscribers.pop(topic, None)
                    stopping += self._watches.pop(topic, [])
        for watch in stopping:  # outside the lock: unsubscribe joins a thread
            watch.unsubscribe()

    def close(self) -> None:
        with self._lock:
            watches = [w for ws in self._watches.values() for w in ws]
            subscribers = [s for ss in self._subscribers.values() for s in ss]
            self._watches.clear()
            self._subscribers.clear()
        for watch in watches:
            watch.unsubscribe()
        for subscription in subscribers:
            subscription.changes.put(_CLOSED)

    def _listen(self, topic: str) -> list[Any]:
        from google.cloud import firestore

        client = self.store.client
        changed = self._tell(topic)
        newest = firestore.Query.DESCENDING
        if topic == "jobs":
            query = client.collection(JOBS).order_by("created_at", direction=newest)
            return [query.limit(self.jobs_shown).on_snapshot(changed)]
        if topic == "instances":
            query = client.collection(INSTANCES).order_by("created_at", direction=newest)
            return [query.limit(self.jobs_shown).on_snapshot(changed)]
        job = client.collection(JOBS).document(topic.removeprefix(JOB_TOPIC))
        return [job.on_snapshot(changed), job.collection(EPOCHS).on_snapshot(changed)]

    def _tell(self, topic: str) -> Any:
        def changed(*_: Any) -> None:  # on the client library's thread
            with self._lock:
                subscribers = list(self._subscribers.get(topic, []))
            for subscription in subscribers:
                subscription.tell(topic)

        return changed


def check_topic(topic: str) -> str:
    import re

    if topic in ("jobs", "instances"):
        return topic
    if topic.startswith(JOB_TOPIC) and re.fullmatch(JOB_ID_PATTERN, topic.removeprefix(JOB_TOPIC)):
        return topic
    raise ValueError(f"topic {topic!r}: expected jobs, instances or job/JOB_ID")
