"""An update sends only the fields it changed (``spotline.shared.adapters.firestore_diff``);
``tests/emulators/test_firestore_store_contract.py`` checks on the emulator that what is stored is
the whole changed document all the same."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spotline.shared.adapters.firestore_diff import changed_fields
from spotline.shared.domain.documents import to_firestore
from tests.documents import job


def test_only_changed_top_level_fields_are_sent() -> None:
    before = to_firestore(job())
    after = to_firestore(job().model_copy(update={"cost_usd": 1.5, "metrics": {"loss": 0.1}}))
    assert changed_fields(before, after) == {"cost_usd": 1.5, "metrics": {"loss": 0.1}}
    assert changed_fields(before, before) == {}


def test_a_nested_change_sends_the_whole_top_level_field() -> None:
    stamped = job().model_copy(update={"updated_at": datetime(2027, 1, 1, tzinfo=UTC)})
    spec = stamped.spec.model_copy(update={"epochs": 99})
    after = to_firestore(stamped.model_copy(update={"spec": spec}))
    sent = changed_fields(to_firestore(job()), after)
    assert sorted(sent) == ["spec", "updated_at"] and sent["spec"]["epochs"] == 99


def test_a_new_field_is_sent_and_a_dropped_one_refused() -> None:
    assert changed_fields({"a": 1}, {"a": 1, "b": 2}) == {"b": 2}
    with pytest.raises(ValueError, match=r"drops fields \['b'\]"):
        changed_fields({"a": 1, "b": 2}, {"a": 1})
