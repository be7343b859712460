"""A gang's job cancelled, or out of its runtime, while it replaces a lost
node: every VM of the attempt goes at once, the replacement and the lost
VM still in its notice included, and the replacement's late boot report
changes nothing (through the real handlers on the local cloud)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import CancelRequest, ReaperTick
from spotline.shared.domain.states import InstanceStatus, JobStatus, JobSubstatus
from tests.emulators.test_gang_replacement import (
    GANG,
    N0,
    N1,
    R1,
    boot,
    job_of,
    names,
    preempt,
    training_gang,
)

pytestmark = pytest.mark.emulators


def _replacing(call: Callable[..., Any], host: LocalCloud, project: str, spec: Any = None) -> None:
    training_gang(call, spec)
    preempt(call, N1, step=40)
    job = job_of(project)
    assert job.substatus == JobSubstatus.REPLACING_NODE
    assert names(host) == [N0, R1]


def _all_closed(project: str) -> None:
    closed = {i.name: i.status for i in FirestoreStore(project).list_instances()}
    assert set(closed) == {N0, N1, R1}
    assert set(closed.values()) == {InstanceStatus.CLOSED}, closed
    user = FirestoreStore(project).get_user("alice")
    assert user is not None and user.active_instances == []


def test_a_cancel_while_replacing_deletes_the_survivors_and_the_replacement(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    _replacing(call, host, project)
    for _ in range(2):  # redelivered: nothing more
        cancel = CancelRequest(job_id="job1", reason="enough")
        call("cancel_job", "cancel", cancel, message_id="c1")
    assert names(host) == []
    assert job_of(project).status == JobStatus.CANCELED
    _all_closed(project)
    # The replacement's boot report arrives late: no regroup, nothing inserted.
    start = len(host.requests)
    boot(call, R1)
    assert job_of(project).status == JobStatus.CANCELED
    assert names(host) == []
    assert not [r for r in host.requests[start:] if r.method == "POST"]


def test_max_runtime_while_replacing_deletes_the_survivors_and_the_replacement(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    _replacing(call, host, project, {**GANG, "max_runtime_s": 1})
    store = FirestoreStore(project)
    past = datetime.now(UTC) - timedelta(seconds=5)
    store.update_job("job1", lambda job: job.model_copy(update={"created_at": past}))
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert names(host) == []
    job = job_of(project)
    assert job.status == JobStatus.CANCELED
    assert job.error is not None and "max_runtime_s" in job.error
    _all_closed(project)
