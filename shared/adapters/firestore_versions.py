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
is) is never taken from a kept version, which may be stale.

Only jobs are kept: a user's document is written by every placement of the
user's jobs, so a kept version of it would mostly be stale, and a stale one
costs a refused write on top of the read.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any

# A request touches a handful of jobs; a sweep, a few hundred.
_KEPT = 1024


class WrittenVersions:
    """(collection, key) -> (document as written, its update time); the
    oldest forgotten past ``size``. Thread-safe: a process serves concurrent
    requests with one store."""

    def __init__(self, size: int = _KEPT) -> None:
        self._size = size
        self._kept: OrderedDict[tuple[str, str], tuple[Any, datetime]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, collection: str, key: str) -> tuple[Any, datetime] | None:
        with self._lock:
            return self._kept.get((collection, key))

    def put(self, collection: str, key: str, doc: Any, update_time: datetime) -> None:
        with self._lock:
            self._kept[(collection, key)] = (doc, update_time)
            self._kept.move_to_end((collection, key))
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)

    def drop(self, collection: str, key: str) -> None:
        with self._lock:
            self._kept.pop((collection, key), None)
