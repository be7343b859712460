"""The last version of each job this process wrote, so that the next guarded
update of it can be tried without reading the document first.

A handler writes its job several times in one request: created, its outbox
emptied once the event went out, moved on (waiting, or its VM recorded),
its outbox emptied again. Each guarded update read the document this
process had written a moment before. Kept here with the update time its
write returned, that version is the next update's starting point and its
precondition: when no one else wrote in between, the write succeeds and the
read is saved; when someone did, the precondition fails and the update reads
as before. A decision not to write (the change leaves the document as it
is), and a refusal (the change raises: a stale event, a forged token), are
never taken from a kept version, which may be stale: the update reads.

Only jobs are kept, and only for a short while: a stale version costs a
refused write on top of the read. A user's document is written by every
placement of the user's jobs, so a kept version of it would mostly be stale;
a version older than a request's course (a placement waits for its VM's
insert between two writes of its job) is as likely to be, as when the
reaper, a minute after its last sweep, updates a job the VM's events have
written since.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

# A request touches a handful of jobs; a sweep, a few hundred.
_KEPT = 1024
# Longer than a placement's insert and its operation's wait; shorter than
# the reaper's minute between sweeps.
_MAX_AGE_S = 30.0


class WrittenVersions:
    """(collection, key) -> (document as written, its update time), for
    ``max_age_s``; the oldest forgotten past ``size``. Thread-safe: a process
    serves concurrent requests with one store."""

    def __init__(
        self,
        size: int = _KEPT,
        max_age_s: float = _MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._size = size
        self._max_age_s = max_age_s
        self._clock = clock
        self._kept: OrderedDict[tuple[str, str], tuple[Any, datetime, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, collection: str, key: str) -> tuple[Any, datetime] | None:
        with self._lock:
            kept = self._kept.get((collection, key))
            if kept is None:
                return None
            doc, update_time, at = kept
            if self._clock() - at > self._max_age_s:
                del self._kept[(collection, key)]
                return None
            return doc, update_time

    def put(self, collection: str, key: str, doc: Any, update_time: datetime) -> None:
        with self._lock:
            self._kept[(collection, key)] = (doc, update_time, self._clock())
            self._kept.move_to_end((collection, key))
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)

    def drop(self, collection: str, key: str) -> None:
        with self._lock:
            self._kept.pop((collection, key), None)
