"""Per-user quotas (the seed's defaults: 5 active jobs, 5 active instances,
4 stopped instances; the limits are ``Settings``), as pure changes of a
``UserDoc``.

The store applies them with a guarded write, so concurrent submissions of one
user can never hold more slots than the quota.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from shared.documents import UserDoc

SlotKind = Literal["active_jobs", "active_instances", "stopped_instances"]


def take_slot(user: UserDoc, kind: SlotKind, key: str, limit: int, now: datetime) -> UserDoc:
    """The user with ``key`` holding a slot, if it already does or one is free;
    otherwise unchanged (check with ``holds``)."""
    held = getattr(user, kind)
    if key in held or len(held) >= limit:
        return user
    return user.model_copy(update={kind: [*held, key], "updated_at": now})


def free_slot(user: UserDoc, kind: SlotKind, key: str, now: datetime) -> UserDoc:
    held = getattr(user, kind)
    if key not in held:
        return user
    return user.model_copy(update={kind: [k for k in held if k != key], "updated_at": now})


def holds(user: UserDoc, kind: SlotKind, key: str) -> bool:
    return key in getattr(user, kind)


def over_quota_reason(user: UserDoc, kind: SlotKind, limit: int) -> str:
    what = kind.replace("_", " ")
    return f"user {user.user} has {len(getattr(user, kind))} {what} (quota {limit})"
