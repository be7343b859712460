"""The Firestore queries behind the store's listings: a filter, key order,
a page past a key; whole documents, or their keys alone (the reaper's tick
lists 10,000 keys where it has no use for the documents)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

IN_LIMIT = 30  # Firestore's bound on the values of an ``in`` filter


def page_query(
    client: Any,
    collection: str,
    field: str,
    values: Iterable[str] | None,
    limit: int,
    after: str | None,
    user: str | None = None,
) -> Any:
    """The filter's documents (only ``user``'s, when given) in key order, the
    first ``limit`` of them past key ``after``.

    No composite index is needed: one value is an equality, and equalities
    on two fields are served by merging single-field indexes; an ``in`` is
    only ever used alone."""
    from google.cloud.firestore_v1.base_query import FieldFilter

    query: Any = client.collection(collection)
    wanted = [str(value) for value in values] if values is not None else None
    if wanted is not None:
        if not 0 < len(wanted) <= IN_LIMIT:
            # Firestore answers InvalidArgument; a caller's mistake is a ValueError.
            raise ValueError(f"{field} in {wanted}: between 1 and {IN_LIMIT} values")
        op = "==" if len(wanted) == 1 else "in"
        query = query.where(filter=FieldFilter(field, op, wanted[0] if op == "==" else wanted))
    if user is not None:
        if wanted is not None and len(wanted) > 1:
            # ``in`` and another field would need a composite index.
            raise ValueError(f"{field} in {wanted} with a user: give one value")
        query = query.where(filter=FieldFilter("user", "==", user))
    query = query.order_by("__name__")
    if after is not None:
        query = query.start_after({"__name__": client.collection(collection).document(after)})
    return query.limit(limit)


def keys_of(query: Any) -> list[str]:
    """The keys of a query's documents, with none of their fields sent."""
    return [snap.id for snap in query.select(["__name__"]).stream()]
