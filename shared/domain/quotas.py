"""Per-user quotas (by default 5 active jobs, 5 active instances,
4 stopped instances; the limits are ``Settings``), as pure changes of a
``UserDoc``.

The store applies them with a guarded write, so concurrent submissions of one
user can never hold more slots than the quota.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from spotline.shared.domain.documents import UserDoc

SlotKind = Literal["active_jobs", "active_instances", "stopped_instances"]


def take_slot(user: UserDoc, kind: SlotKind, key: str, limit: int, now: datetime) -> UserDoc:
    """The user with ``key`` holding a slot, if it already does or one is free;
    otherwise unchanged (check with ``holds``)."""
    return take_slots(user, kind, [key], limit, now)


def take_slots(
    user: UserDoc, kind: SlotKind, keys: Sequence[str], limit: int, now: datetime
) -> UserDoc:
    """Every key holding a slot, or the user unchanged: all or nothing (a
    multi-node job needs a slot per VM, and half a gang is no use)."""
    held = getattr(user, kind)
    missing = [key for key in dict.fromkeys(keys) if key not in held]
    if not missing or len(held) + len(missing) > limit:
        return user
    return user.model_copy(update={kind: [*held, *missing], "updated_at": now})


def keep_slot(user: UserDoc, kind: SlotKind, key: str, now: datetime) -> UserDoc:
    """``key`` holding a slot whatever the limit: what it stands for exists
    already (a VM adopted by a redelivered placement), and the list must say so."""
    held = getattr(user, kind)
    if key in held:
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
