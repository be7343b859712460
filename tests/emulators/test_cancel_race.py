"""A cancel that comes while the placement's VM is made
but not yet recorded on the job. The cancel ends the job with no attempt
record of that VM; the VM is found and deleted later (by the placement's own
next step, or by the reaper as an orphan), and the minutes it ran must still
be charged to the job: from Compute Engine's creationTimestamp to the delete,
once, however many times the delete or the events around it come again.

On the Firestore emulator, with the local cloud's Compute Engine reached
through GceCompute: the handlers through the functions framework where the
real clock will do; the ops on a stepped clock (shared by the local cloud, so
the VM's creationTimestamp is on it too) where the exact sum is the point.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.functions.deps import Deps
from spotline.functions.ops.jobs import admit, cancel, start
from spotline.functions.ops.sweep import sweep
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.infra.localcloud.launchers import RecordLauncher
from spotline.infra.localcloud.outage import Outage
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.gce_compute import GceCompute
from spotline.shared.adapters.recording_bus import RecordingBus
from spotline.shared.contract.events import CancelRequest, ReaperTick
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.documents import InstanceDoc, JobDoc
from spotline.shared.domain.errors import TransientError
from spotline.shared.domain.pricing import vm_cost
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import InstanceStatus, JobStatus
from spotline.shared.settings import Settings
from tests.conftest import SPEC
from tests.replay import Crash

pytestmark = pytest.mark.emulators

VM = "sl-job1-a1"
ZONE = "us-central1-a"
# SPEC's first machine id, the one placed: Spot g2-standard-4.
SPOT_PRICE = load_catalog()["g2-standard-4"].spot_usd_per_hour
ON_DEMAND_PRICE = load_catalog()["g2-standard-4"].on_demand_usd_per_hour
# How late the insert's answer comes: the cancel is handled meanwhile.
INSERT_LATE_S = 3.0
T0 = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)


def inserts_answered_late(delay_s: float) -> Outage:
    """Each insert is done at once, its answer ``delay_s`` later."""
    return Outage(delay_s=delay_s, methods=frozenset({"POST"}), path_pattern=r"/instances$")


def charged_once(job: JobDoc) -> float:
    """The one charge of VM on ``job``, checked against its own times; its cost."""
    [charge] = [c for c in job.unrecorded_vms if c.instance == VM]
    assert charge.ended_at is not None
    seconds = (charge.ended_at - charge.started_at).total_seconds()
    assert charge.cost_usd == round(vm_cost(SPOT_PRICE, seconds), 6)
    assert charge.on_demand_cost_usd == round(vm_cost(ON_DEMAND_PRICE, seconds), 6)
    assert job.cost_usd == charge.cost_usd and job.on_demand_cost_usd == charge.on_demand_cost_usd
    return charge.cost_usd


def test_a_cancel_while_the_insert_is_answered_charges_the_vm_once(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """submit_job's insert is made; while its answer is on the way the job is
    canceled (no VM on it to delete); the placement then records the VM for
    a job that has ended, and the VM is deleted. Then everything again."""
    store = FirestoreStore(project)
    host.start_outage(inserts_answered_late(INSERT_LATE_S))
    answers: list[int] = []
    submit = threading.Thread(
        target=lambda: answers.append(call("submit_job", "submit", SPEC).status_code)
    )
    submit.start()
    created = made_at(host)
    host.end_outage()  # the insert in flight keeps its late answer
    canceled_at = datetime.now(UTC)
    cancel_request = CancelRequest(job_id="job1", reason="wrong learning rate")
    assert call("cancel_job", "cancel", cancel_request, message_id="c1").status_code == 200
    assert submit.is_alive(), "the insert was answered before the cancel: not the race"
    job = store.get_job("job1")
    assert job is not None and job.status == JobStatus.CANCELED and job.attempts == []
    submit.join()
    assert answers == [200]

    call("reaper", "reaper_tick", ReaperTick(), message_id="tick1")
    assert host.list() == []
    closed = store.get_instance(VM)
    assert closed is not None and closed.status == InstanceStatus.CLOSED
    job = store.get_job("job1")
    assert job is not None and job.cost_usd > 0, "the VM's minutes are not in the job's cost"
    cost = charged_once(job)
    [charge] = job.unrecorded_vms
    assert (charge.attempt, charge.zone, charge.machine_id) == (1, ZONE, "g2-standard-4")
    assert charge.started_at == created
    assert canceled_at <= charge.ended_at <= datetime.now(UTC)  # type: ignore[operator]

    # Everything once more: the submission, the cancel, two sweeps.
    assert call("submit_job", "submit", SPEC).status_code == 200
    assert call("cancel_job", "cancel", cancel_request, message_id="c1").status_code == 200
    for tick in ("tick2", "tick3"):
        call("reaper", "reaper_tick", ReaperTick(), message_id=tick)
    again = store.get_job("job1")
    assert again is not None and charged_once(again) == cost
    assert again.unrecorded_vms == job.unrecorded_vms and host.list() == []


def made_at(host: LocalCloud) -> datetime:
    """The creationTimestamp of VM, once the insert has made it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        vm = host.instance(ZONE, VM)
        if vm is not None:
            return datetime.fromisoformat(vm["creationTimestamp"])
        time.sleep(0.02)
    raise AssertionError(f"{VM} was never made")


@pytest.fixture
def stepped(project: str) -> Iterator[tuple[Deps, LocalCloud, list[datetime]]]:
    """Deps on the emulator's Firestore and the local cloud, both on the
    returned clock (a one-item list: set ``[0]`` to move it). GceCompute
    gives up on an answer after 0.5 s, as a busy function's client would."""
    now = [T0]
    with LocalCloud(project, RecordLauncher(), clock=lambda: now[0]) as cloud:
        settings = Settings(project=project, zones=(ZONE, "us-central1-b"))
        compute = GceCompute(
            project,
            api_endpoint=cloud.endpoint,
            operation_timeout_s=5.0,
            request_timeout_s=0.5,
            read_retry_s=1.0,
        )
        store = FirestoreStore(project)
        deps = Deps(settings, store=store, compute=compute, bus=RecordingBus(project))
        deps.clock = lambda: now[0]
        yield deps, cloud, now


def test_a_vm_whose_insert_answer_was_lost_is_charged_when_the_reaper_deletes_it(
    stepped: tuple[Deps, LocalCloud, list[datetime]],
) -> None:
    """The insert is made but its answer comes after the client gave up: the
    submission fails with no instance document. The job is canceled a minute
    later; the reaper deletes the VM as an orphan two minutes after it was
    made: two minutes at its Spot price, whatever comes after."""
    deps, cloud, now = stepped
    cloud.start_outage(inserts_answered_late(1.0))
    job = admit(deps, JobSpec.model_validate(SPEC), "m1", T0)
    with pytest.raises(TransientError):
        start(deps, job, T0)
    cloud.end_outage()
    assert [vm["name"] for vm in cloud.list()] == [VM]
    assert deps.store.get_instance(VM) is None
    swept = canceled_then_swept(deps, cloud, now, "orphans_deleted")
    redelivered_and_swept_again(deps, cloud, now, swept)


class DiesAfterTheInstance(FirestoreStore):
    """The placing function's process dies right after it wrote the instance
    document, before the job records the VM."""

    def create_instance(self, instance: InstanceDoc) -> bool:
        super().create_instance(instance)
        raise Crash(f"died after writing instances/{instance.name}")


def test_a_vm_recorded_on_its_instance_only_is_charged_when_the_reaper_releases_it(
    stepped: tuple[Deps, LocalCloud, list[datetime]], project: str
) -> None:
    """The placement wrote the instance document and died before the job
    recorded the VM; the job is canceled; the reaper releases the instance
    of a job that has ended, and the job pays from the VM's creation."""
    deps, cloud, now = stepped
    job = admit(deps, JobSpec.model_validate(SPEC), "m1", T0)
    dying = Deps(deps.settings, store=DiesAfterTheInstance(project), compute=deps.compute)
    dying.clock = deps.clock
    with pytest.raises(Crash):
        start(dying, job, T0)
    instance = deps.store.get_instance(VM)
    assert instance is not None and instance.vm_created_at == T0
    swept = canceled_then_swept(deps, cloud, now, "released")
    redelivered_and_swept_again(deps, cloud, now, swept)


def canceled_then_swept(deps: Deps, cloud: LocalCloud, now: list[datetime], outcome: str) -> JobDoc:
    """The job canceled a minute after its VM was made, with no record of it;
    a sweep a minute later deletes the VM (``outcome``) and charges it."""
    now[0] = T0 + timedelta(minutes=1)
    canceled = cancel(deps, "job1", "wrong learning rate", now[0])
    assert (canceled.status, canceled.attempts, canceled.cost_usd) == (JobStatus.CANCELED, [], 0)

    now[0] = T0 + timedelta(minutes=2)
    assert sweep(deps, now[0])[outcome] == 1
    assert cloud.list() == []
    swept = deps.store.get_job("job1")
    assert swept is not None
    assert swept.cost_usd == round(vm_cost(SPOT_PRICE, 120), 6), "the VM's minutes are lost"
    assert charged_once(swept) == swept.cost_usd
    [charge] = swept.unrecorded_vms
    assert (charge.started_at, charge.ended_at, charge.outcome) == (
        T0,
        T0 + timedelta(minutes=2),
        "canceled",
    )
    return swept


def redelivered_and_swept_again(
    deps: Deps, cloud: LocalCloud, now: list[datetime], swept: JobDoc
) -> None:
    """Later: the submission redelivered, the cancel again, more sweeps."""
    now[0] = T0 + timedelta(minutes=5)
    start(deps, swept, now[0])
    cancel(deps, "job1", "wrong learning rate", now[0])
    sweep(deps, now[0])
    now[0] = T0 + timedelta(minutes=6)
    sweep(deps, now[0])
    again = deps.store.get_job("job1")
    assert again is not None and again.unrecorded_vms == swept.unrecorded_vms
    assert again.cost_usd == swept.cost_usd and cloud.list() == []
