"""Waiting for a machine option (tests/unit/test_option_waiting.py) through the
functions framework, on the Firestore emulator and the local cloud."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import ReaperTick
from spotline.shared.domain.states import JobSubstatus
from tests.unit.test_option_waiting import SECOND, SPEC, full


@pytest.mark.emulators
def test_over_the_wire_the_queue_entry_keeps_when_the_job_began_to_wait(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    full(host, "g2-standard-4")
    call("submit_job", "submit", SPEC)
    store = FirestoreStore(project)
    job = store.get_job("job1")
    assert job is not None and job.substatus == JobSubstatus.WAITING_FOR_CAPACITY
    entry = store.get_queue("job1")
    assert entry is not None and entry.waiting_since is not None
    # Made due, the reaper retries the first option: its minute is not out.
    store.put_queue(entry.model_copy(update={"not_before": datetime.now(UTC)}))
    call("reaper", "reaper_tick", ReaperTick(), message_id="tick")
    assert host.list() == []
    again = store.get_queue("job1")
    assert again is not None and again.waiting_since == entry.waiting_since and again.tries == 2
    # Its minute out (moved back, as if it had passed), the second option is asked for.
    store.put_queue(
        again.model_copy(
            update={
                "not_before": datetime.now(UTC),
                "waiting_since": datetime.now(UTC) - timedelta(seconds=61),
            }
        )
    )
    call("reaper", "reaper_tick", ReaperTick(), message_id="tick2")
    placed = store.get_job("job1")
    assert placed is not None and placed.machine_id == SECOND
