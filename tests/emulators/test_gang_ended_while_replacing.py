"""A gang's job that ends while it replaces nodes lets every VM of the
attempt go, through the real handlers and the reaper on the local cloud:
a replacement inserted by a function that died before recording it
included (``spotline.shared.domain.reaping.orphaned``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import Heartbeat, ReaperTick
from spotline.shared.domain import node_replacement
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.placement import vm_labels
from spotline.shared.domain.states import JobStatus, JobSubstatus
from tests.conftest import SPEC
from tests.emulators.test_gang_replacement import job_of, names, preempt
from tests.emulators.test_gang_resize import N0, N1, N2, R1
from tests.emulators.test_gangs import node

pytestmark = pytest.mark.emulators
S = JobSubstatus


def test_the_second_loss_at_max_preemptions_lets_an_unrecorded_replacement_go(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """max_preemptions=1. Node 1's loss was written and its replacement
    inserted, and the function died before recording the replacement; node
    2's loss then ends the job. The replacement runs nothing: the reaper
    deletes it with the attempt's other VMs."""
    call("submit_job", "submit", {**SPEC, "nodes": 3, "max_preemptions": 1}, message_id="s1")
    for name in (N0, N1, N2):
        beat = node(Heartbeat, name, phase="TRAINING", step=10)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")
    now = datetime.now(UTC)
    store = FirestoreStore(project)
    store.update_job(
        "job1", lambda job: node_replacement.lost(job, N1, 1, S.PREEMPTED, now, f"{N1} preempted")
    )
    zone = host.get(N0)["zone"]  # type: ignore[index]
    host.insert(
        {
            "name": R1,
            "zone": zone,
            "machine_type": "g2-standard-4",
            "labels": vm_labels("job1", 1, "alice"),
        }
    )
    preempt(call, N2, mid="p2")
    job = job_of(project)
    assert (job.status, job.preemptions) == (JobStatus.FAILED, 2)
    assert job.error is not None and "max_preemptions=1" in job.error
    # The attempt's VMs may save through their notice: the sweep after it
    # (the record's end moved back, rather than the test waiting 45 s).
    store.update_job("job1", _ended_before)
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    assert names(host) == []


def _ended_before(job: JobDoc) -> JobDoc:
    records = [
        r.model_copy(update={"ended_at": r.ended_at - timedelta(seconds=60)}) if r.ended_at else r
        for r in job.attempts
    ]
    return job.model_copy(update={"attempts": records})


def test_the_second_loss_at_max_preemptions_fails_the_job_and_lets_every_vm_go(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """max_preemptions=1: node 1's loss is replaced; node 2's, the second
    preemption, fails the job at once, and node 0 and the replacement go
    with it (no sweep needed); a redelivery changes nothing."""
    call("submit_job", "submit", {**SPEC, "nodes": 3, "max_preemptions": 1}, message_id="s1")
    for name in (N0, N1, N2):
        beat = node(Heartbeat, name, phase="TRAINING", step=10)
        call("on_epoch_done", "epoch_done", beat, message_id=f"h-{name}")
    preempt(call, N1, step=38, mid="p1")
    assert names(host) == [N0, R1, N2]
    for mid in ("p2", "p2-again"):
        preempt(call, N2, mid=mid)
    job = job_of(project)
    assert (job.status, job.attempt, job.preemptions) == (JobStatus.FAILED, 1, 2)
    assert job.error is not None and "max_preemptions=1" in job.error
    assert [r.outcome for r in job.attempts] == ["preempted"]
    assert names(host) == []
    store = FirestoreStore(project)
    for name in (N0, R1, N2):
        instance = store.get_instance(name)
        assert instance is not None and instance.status == "CLOSED", name
