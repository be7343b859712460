"""What only the Firestore store promises: documents a person can read in the
Firestore console. The port's contract is tested in tests/store_contract.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spotline.shared.adapters.firestore_store import FirestoreStore
from tests.store_contract import T0, a_job, an_entry

pytestmark = pytest.mark.emulators


def test_documents_hold_plain_words_and_real_timestamps(project: str) -> None:
    store = FirestoreStore(project)
    store.create_job(a_job())
    store.put_queue(an_entry("job1", not_before_s=30))
    raw = store.client.collection("jobs").document("job1").get().to_dict() or {}
    assert raw["status"] == "QUEUING" and raw["substatus"] == "REQUESTING_SERVER"
    assert raw["progress"] == "0/3"
    assert raw["created_at"] == T0 and isinstance(raw["created_at"], datetime)
    assert raw["history"][0]["status"] == "QUEUING"
    queued = store.client.collection("queue").document("job1").get().to_dict() or {}
    assert queued["reason"] == "no-capacity"
    assert queued["not_before"] == datetime(2026, 11, 21, 12, 0, 30, tzinfo=UTC)
