"""A store that counts Firestore's billed operations at the store port's boundary.

``CountingStore(inner)`` implements ``spotline.shared.ports.store.Store`` by handing
every call to ``inner`` (the real ``FirestoreStore`` in the benchmarks, any
store in the tests) and counting what Firestore would bill for it, the way
Firestore bills: a read per document a get or a query returns, and one for a
query that returns none; a write per document created, set or updated; a
delete per delete. It exists so that "reads per event" and "the sweep reads
no terminal job" are numbers a test can assert and a benchmark can price.

What the port hides is counted from what it shows: an ``update_*`` reads once
per run of its ``change`` (a contended write runs it again), less the runs
the Firestore store started from the version of a job it wrote last
(``firestore_versions``: no read), and writes once when the last run
changed the document; ``availability`` counts its one
query (the hourly documents it sums are not returned). A method of the port
this class does not know raises ``AttributeError``, so a new store call
cannot go uncounted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Each port method by what Firestore bills for it.
_GETS = frozenset(
    {"get_job", "get_instance", "get_queue", "get_user", "get_machine", "get_rejection"}
)
_QUERIES = frozenset(
    {
        "list_jobs",
        "recent_jobs",
        "list_epochs",
        "instances_of_job",
        "list_instances",
        "stopped_instances",
        "due_queue",
        "queue_of_user",
        "list_users",
        "recent_rejections",
        "availability",
        "unpublished_jobs",
        # Keys alone: billed as a read per document all the same.
        "list_job_ids",
        "list_instance_names",
        "stopped_instance_names",
        "list_user_names",
    }
)
_BATCH_GETS = frozenset({"get_jobs", "get_instances", "get_users"})
_CREATES = frozenset({"create_job", "create_instance", "record_rejection"})
_SETS = frozenset({"put_epoch", "put_queue", "record_request"})
_UPDATES = frozenset({"update_job", "update_instance", "update_user"})
_DELETES = frozenset({"delete_queue"})
METHODS = (
    _GETS | _BATCH_GETS | _QUERIES | _CREATES | _SETS | _UPDATES | _DELETES | {"seed_machines"}
)


@dataclass
class Operations:
    """Billed operations, in total and by port method (``"get_job.reads"``), and
    the calls of each method (``"get_job.calls"``: round trips, near enough)."""

    reads: int = 0
    writes: int = 0
    deletes: int = 0
    by_method: Counter[str] = field(default_factory=Counter)

    def add(self, method: str, reads: int = 0, writes: int = 0, deletes: int = 0) -> None:
        self.by_method[f"{method}.calls"] += 1
        self.reads += reads
        self.writes += writes
        self.deletes += deletes
        for kind, n in (("reads", reads), ("writes", writes), ("deletes", deletes)):
            if n:
                self.by_method[f"{method}.{kind}"] += n

    @property
    def calls(self) -> int:
        return sum(n for key, n in self.by_method.items() if key.endswith(".calls"))

    def snapshot(self) -> Operations:
        return Operations(self.reads, self.writes, self.deletes, Counter(self.by_method))

    def __sub__(self, other: Operations) -> Operations:
        by_method = Counter(self.by_method)
        by_method.subtract(other.by_method)
        return Operations(
            self.reads - other.reads,
            self.writes - other.writes,
            self.deletes - other.deletes,
            +by_method,
        )


class CountingStore:
    """``inner``, with every call's billed operations added to ``self.ops``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.ops = Operations()

    def __getattr__(self, name: str) -> Any:
        if name not in METHODS:
            raise AttributeError(f"CountingStore does not know how Firestore bills {name!r}")
        method = getattr(self.inner, name)
        if name in _UPDATES:
            return lambda key, change: self._update(name, method, key, change)

        def counted(*args: Any, **kwargs: Any) -> Any:
            if name in _BATCH_GETS:
                args = (list(args[0]),)  # read twice: by the store and by the count
            result = method(*args, **kwargs)
            self.ops.add(name, **_billed(name, args, result))
            return result

        return counted

    def _update(self, name: str, method: Callable[..., Any], key: str, change: Any) -> Any:
        runs, changed = [0], [False]

        def counted_change(doc: Any) -> Any:
            runs[0] += 1
            new = change(doc)
            changed[0] = not (new is doc or new == doc)
            return new

        unread = getattr(self.inner, "unread_changes", None)
        before = unread() if unread is not None else 0
        result = method(key, counted_change)
        # A run on the version the store wrote last read nothing (FirestoreStore).
        reads = runs[0] - (unread() - before if unread is not None else 0)
        if result is None:  # a missing document is one read that finds nothing
            reads = max(reads, 1)
        self.ops.add(name, reads=reads, writes=int(changed[0]))
        return result


def _billed(name: str, args: tuple[Any, ...], result: Any) -> dict[str, int]:
    if name in _GETS:
        return {"reads": 1}
    if name in _BATCH_GETS:
        return {"reads": len(set(args[0]))}  # a key not found is billed as a read too
    if name == "availability":
        return {"reads": 1}
    if name in _QUERIES:
        return {"reads": max(len(result), 1)}
    if name in _CREATES:
        return {"writes": int(bool(result))}
    if name in _SETS:
        return {"writes": 1}
    if name in _DELETES:
        return {"deletes": 1}
    return {"writes": len(args[0])}  # seed_machines: one per machine
