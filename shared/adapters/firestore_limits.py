"""Firestore's limits on documents, checked in memory so that what the in-memory
store takes, Firestore takes too: the client library raises ValueError (int64,
empty keys) and the server InvalidArgument (nesting, arrays in arrays, reserved
names, size, document ids).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from spotline.shared.domain.documents import to_firestore


def stored(doc: BaseModel) -> dict[str, Any]:
    """The document's fields as Firestore stores them: its values, with every
    timestamp in UTC (the client library takes a naive one as UTC).

    Raises:
        ValueError: a value Firestore would refuse (see ``_refused``).
    """
    fields = utc(to_firestore(doc))
    problem = _refused(fields, 0, in_array=False)
    if problem is None and _size(fields) > _DOC_BYTES:
        problem = f"the document is over {_DOC_BYTES} bytes"
    if problem is not None:
        raise ValueError(f"Firestore would refuse {type(doc).__name__}: {problem}")
    return fields


_DOC_BYTES = 1_048_576
_DEPTH = 20
_RESERVED = re.compile(r"^__.*__$", re.DOTALL)


def _refused(value: Any, depth: int, in_array: bool) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return f"{value} is outside the 64-bit range"
    if isinstance(value, dict | list) and depth > _DEPTH:
        return f"maps and arrays nest more than {_DEPTH} deep"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not key or _RESERVED.match(key):
                return f"the field name {key!r} is empty or reserved"
            problem = _refused(item, depth + 1, in_array=False)
            if problem is not None:
                return problem
    if isinstance(value, list):
        if in_array:
            return "an array holds an array"
        for item in value:
            problem = _refused(item, depth + 1, in_array=True)
            if problem is not None:
                return problem
    return None


def _size(value: Any) -> int:
    """Firestore's storage size of a value, near enough (strings: UTF-8 + 1)."""
    if isinstance(value, str):
        return len(value.encode("utf-8", errors="replace")) + 1
    if isinstance(value, dict):
        return sum(_size(key) + _size(item) for key, item in value.items())
    if isinstance(value, list):
        return sum(_size(item) for item in value)
    return 8


def checked_key(key: str) -> str:
    """A document id Firestore takes; ValueError otherwise."""
    if not key or "/" in key or key in (".", "..") or _RESERVED.match(key):
        raise ValueError(f"{key!r} is not a Firestore document id")
    return key


def utc(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, dict):
        return {key: utc(item) for key, item in value.items()}
    if isinstance(value, list):
        return [utc(item) for item in value]
    return value
