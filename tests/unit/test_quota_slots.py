"""Quota slots on the store: taken once, never past the limit, all of a gang's or
none (through the handlers: tests/emulators/test_quotas.py)."""

from __future__ import annotations

from spotline.shared.domain.documents import UserDoc
from spotline.shared.domain.quotas import free_slot, holds, keep_slot, take_slot, take_slots
from tests.emulators.test_quotas import T0


def test_slots_are_taken_once_and_never_past_the_limit() -> None:
    user = UserDoc(user="alice")
    for job in ("a", "b", "a"):
        user = take_slot(user, "active_jobs", job, 2, T0)
    assert user.active_jobs == ["a", "b"]
    assert not holds(take_slot(user, "active_jobs", "c", 2, T0), "active_jobs", "c")
    user = free_slot(free_slot(user, "active_jobs", "a", T0), "active_jobs", "a", T0)
    assert user.active_jobs == ["b"]


def test_a_gang_takes_all_its_slots_or_none() -> None:
    user = take_slots(UserDoc(user="alice"), "active_instances", ["x"], 3, T0)
    assert take_slots(user, "active_instances", ["n0", "n1", "n2"], 3, T0) == user
    user = take_slots(user, "active_instances", ["n0", "n1", "n1"], 3, T0)
    assert user.active_instances == ["x", "n0", "n1"]
    # A VM that exists is listed whatever the limit: the list must stay true.
    assert keep_slot(user, "active_instances", "adopted", T0).active_instances[-1] == "adopted"
