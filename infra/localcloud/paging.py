"""One page of an aggregated list, as Compute Engine pages one.

An aggregated list answers at most ``maxResults`` resources a page (500 by
default and at most), with a ``nextPageToken`` while more remain, and carries
every scope: those with resources on the page list them, the others a
``warning`` (``NO_RESULTS_ON_PAGE``) instead.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

JsonDict = dict[str, Any]
MAX_RESULTS = 500


def aggregated_page(
    found: Sequence[tuple[str, JsonDict]], scopes: Sequence[str], query: Mapping[str, str], key: str
) -> JsonDict:
    """``items`` (by scope) and ``nextPageToken`` of the page ``query`` asks for.

    Args:
        found: every resource, ``(scope, json)``, in list order.
        scopes: every scope the list covers (``zones/Z``).
        query: ``maxResults`` and ``pageToken``.
        key: the field the resources go in (``instances``).

    Raises:
        ValueError: a ``maxResults`` out of 0-500 or a token this list never gave.
    """
    size = int(query.get("maxResults") or MAX_RESULTS)
    if not 0 <= size <= MAX_RESULTS:
        raise ValueError(
            f"Invalid value for field 'maxResults': '{size}'. Must be less than or equal to 500"
        )
    size = size or MAX_RESULTS
    start = _offset(query.get("pageToken") or "")
    page = found[start : start + size]
    items: JsonDict = {}
    for scope in scopes:
        here = [resource for where, resource in page if where == scope]
        items[scope] = {key: here} if here else {"warning": _no_results(scope)}
    answer: JsonDict = {"items": items}
    if start + size < len(found):
        answer["nextPageToken"] = base64.urlsafe_b64encode(f"o:{start + size}".encode()).decode()
    return answer


def _offset(token: str) -> int:
    if not token:
        return 0
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
        if text.startswith("o:"):
            return int(text[2:])
    except ValueError:
        pass
    raise ValueError(f"Invalid value for field 'pageToken': '{token}'.")


def _no_results(scope: str) -> JsonDict:
    return {
        "code": "NO_RESULTS_ON_PAGE",
        "message": f"There are no results for scope '{scope}' on this page.",
        "data": [{"key": "scope", "value": scope}],
    }
