"""The reaper's tick in pages (``spotline.functions.ops.sweep_pages``): every document
in exactly one page, a VM with its instance, a page small enough for Pub/Sub;
and pages delivered twice, out of order or too late change nothing twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotline.functions import deps as process_deps
from spotline.functions.deps import Deps
from spotline.functions.handlers.reaper_page import reaper_page
from spotline.functions.ops import sweep_pages
from spotline.functions.ops.sweep import tick
from spotline.functions.ops.sweep_apply import apply
from spotline.functions.ops.sweep_pages import SweepPage, fit, vm_pages
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.adapters.recording_bus import RecordingBus
from spotline.shared.domain import reaping as r
from spotline.shared.domain.documents import InstanceDoc, UserDoc
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus, JobSubstatus
from spotline.shared.domain.vms import Accelerator, Provisioning, VmRequest
from spotline.shared.settings import Settings
from tests.documents import entry, instance, job, vm
from tests.local_cloud import client
from tests.replay import Published, cloud_event

NOW = datetime(2026, 11, 24, 12, tzinfo=UTC)


# -- what a tick hands out --


@settings(max_examples=60, deadline=None)
@given(
    live=st.sets(st.integers(0, 40), max_size=25),
    stopped=st.sets(st.integers(0, 40), max_size=10),
    with_vm=st.sets(st.integers(0, 60), max_size=40),
    active=st.sets(st.integers(0, 40), max_size=25),
    size=st.integers(1, 12),
)
def test_every_instance_vm_and_active_job_is_in_exactly_one_page(
    live: set[int], stopped: set[int], with_vm: set[int], active: set[int], size: int
) -> None:
    # A name may be listed both live and stopped: it moved between the two listings.
    listed = [f"sl-j{n}-a1" for n in sorted(live)] + [f"sl-j{n}-a1" for n in sorted(stopped)]
    vms = [vm(f"sl-j{n}-a1") for n in sorted(with_vm)]  # over 40: no instance, orphans
    job_ids = [f"j{n}" for n in sorted(active)]
    pages = vm_pages(listed, vms, job_ids, NOW, size)

    names = [name for p in pages for name in p.names]
    assert sorted(names) == sorted(set(listed))
    assert sorted(v.name for p in pages for v in p.vms) == sorted(v.name for v in vms)
    for page in pages:
        assert len(page.names) <= size
        # A VM rides with its name: no page takes another page's VM for an orphan.
        assert all(v.name in page.names for v in page.vms) or not page.names
        # The active jobs its names were made for, each in one page.
        assert set(page.keys) <= {n.split("-")[1] for n in page.names} & set(job_ids)
    keys = [k for p in pages for k in p.keys]
    assert len(keys) == len(set(keys))
    assert set(keys) == {n.split("-")[1] for n in listed} & set(job_ids)


def test_a_tick_pages_every_active_job_and_user_in_doubt_once(cloud: LocalCloud) -> None:
    store, bus = InMemoryStore(), RecordingBus(cloud.project)
    for n in range(7):
        store.create_job(job(f"run{n}", pending_events=[]))
        # Each holds its active job's slot; users 2 to 6 also a VM's that
        # no live instance is: those are in doubt.
        held = {"active_jobs": [f"run{n}"], "active_instances": [] if n < 2 else ["sl-x-a1"]}
        store.update_user(f"user{n}", partial(UserDoc.model_copy, update=held))
    for n in range(3):  # their instances' pages take these jobs
        store.create_instance(instance(f"sl-run{n}-a1", f"run{n}"))
    settings = Settings(project=cloud.project, zones=("us-central1-a",), reaper_page_size=2)
    counts = tick(Deps(settings, store=store, compute=client(cloud), bus=bus), NOW)
    pages = [p for p in bus.events("reaper_page") if isinstance(p, SweepPage)]
    assert counts["pages"] == len(pages)
    by_kind = Counter(p.kind for p in pages)
    # 3 instances by 2; 4 other jobs by 2; 5 users by a tenth of 2, so 1.
    assert by_kind == {"vms": 2, "jobs": 2, "users": 5}
    keys = [k for p in pages if p.kind != "users" for k in p.keys]
    assert sorted(keys) == [f"run{n}" for n in range(7)]
    assert sorted(k for p in pages if p.kind == "users" for k in p.keys) == [
        f"user{n}" for n in range(2, 7)
    ]


def test_a_page_too_big_for_a_message_is_split(monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"sl-j{n:03}-a1" for n in range(40)]
    vms = [vm(f"sl-j{n:03}-a1") for n in range(0, 40, 2)] + [vm("sl-orphan-a1")]
    keys = [f"j{n:03}" for n in range(40)]
    whole = SweepPage(kind="vms", listed_at=NOW, names=names, vms=vms, keys=keys)
    monkeypatch.setattr(sweep_pages, "MAX_PAGE_BYTES", len(whole.model_dump_json()) // 5)
    parts = fit(whole)
    assert len(parts) > 4
    assert all(len(p.model_dump_json()) <= sweep_pages.MAX_PAGE_BYTES for p in parts)
    assert sorted(n for p in parts for n in p.names) == names
    assert sorted(v.name for p in parts for v in p.vms) == sorted(v.name for v in vms)
    assert sorted(k for p in parts for k in p.keys) == keys
    for part in parts:
        assert all(v.name in part.names or v.name == "sl-orphan-a1" for v in part.vms)


# -- pages through the function: twice, out of order, late --


@contextmanager
def installed(deps: Deps) -> Iterator[None]:
    process_deps._current = deps
    try:
        yield
    finally:
        process_deps.reset()


class World:
    """A job whose VM vanished unreported, on the local cloud; the reaper's
    tick and its pages, delivered by hand at the clock's time."""

    def __init__(self, cloud: LocalCloud) -> None:
        self.cloud, self.store, self.bus = cloud, InMemoryStore(), RecordingBus(cloud.project)
        self.now = NOW
        settings = Settings(project=cloud.project, zones=("us-central1-a",))
        self.deps = Deps(
            settings, store=self.store, compute=client(cloud), bus=self.bus, clock=lambda: self.now
        )
        booted: dict[str, Any] = {"booted_at": NOW, "last_heartbeat_at": NOW}
        self.store.create_job(job(pending_events=[]))
        self.store.create_instance(instance(**booted))  # no VM: it vanished

    def tick(self) -> list[SweepPage]:
        before = len(self.bus.events("reaper_page"))
        tick(self.deps, self.now)
        pages = self.bus.events("reaper_page")[before:]
        return [p for p in pages if isinstance(p, SweepPage)]

    def deliver(self, page: SweepPage | bytes, message_id: str = "p1") -> None:
        data = page if isinstance(page, bytes) else page.model_dump_json().encode()
        with installed(self.deps):
            reaper_page(cloud_event(Published(message_id, "reaper_page", data, 0, self.now)))

    def attempts(self) -> tuple[int, list[str]]:
        current = self.store.get_job("job1")
        assert current is not None
        return current.attempt, sorted(v["name"] for v in self.cloud.list())


def test_a_vanished_vm_is_recovered_by_its_page(cloud: LocalCloud) -> None:
    world = World(cloud)
    [page] = world.tick()
    assert world.attempts() == (1, [])  # the tick only lists
    world.now += timedelta(seconds=2)
    world.deliver(page)
    assert world.attempts() == (2, ["sl-job1-a2"])
    gone = world.store.get_instance("sl-job1-a1")
    assert gone is not None and gone.status == InstanceStatus.CLOSED


def test_a_page_twice_and_an_older_tick_s_page_after_a_newer_one_recover_once(
    cloud: LocalCloud,
) -> None:
    world = World(cloud)
    [older] = world.tick()
    world.now += timedelta(seconds=20)
    [newer] = world.tick()
    world.deliver(newer, "p2")
    world.deliver(newer, "p2")  # redelivered
    world.deliver(older, "p1")  # the earlier tick's, late and out of order
    assert world.attempts() == (2, ["sl-job1-a2"])
    # The new attempt's instance, listed by neither tick, is left alone.
    placed = world.store.get_instance("sl-job1-a2")
    assert placed is not None and placed.status != InstanceStatus.CLOSED


def test_a_page_later_than_its_max_age_is_dropped_and_the_next_tick_does_it(
    cloud: LocalCloud, caplog: pytest.LogCaptureFixture
) -> None:
    world = World(cloud)
    [stale] = world.tick()
    world.now += timedelta(seconds=world.deps.settings.reaper_page_max_age_s + 1)
    world.deliver(stale)
    assert world.attempts() == (1, [])
    [fresh] = world.tick()
    world.deliver(fresh, "p2")
    assert world.attempts() == (2, ["sl-job1-a2"])


def test_a_malformed_page_is_refused_naming_the_field(
    cloud: LocalCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    world = World(cloud)
    world.deliver(b'{"kind": "everything", "listed_at": "2026-11-24T12:00:00Z"}')
    assert "kind" in capsys.readouterr().out
    assert world.attempts() == (1, [])


def test_a_stopped_vm_restarted_after_the_listing_is_judged_as_listed(cloud: LocalCloud) -> None:
    """A page decides on the tick's listing, and a VM claimed for another job
    between the tick and the page keeps running for it."""
    world = World(cloud)
    compute = world.deps.compute
    request = VmRequest(
        name="sl-old-a1",
        zone="us-central1-a",
        machine_type="g2-standard-4",
        provisioning=Provisioning.SPOT,
        request_id="0f1e2d3c-4b5a-4968-8776-655443322110",
        image=world.deps.settings.image,
        labels={"spotline": "true", "spotline-job": "old"},
        accelerators=(Accelerator("nvidia-l4", 1),),
    )
    compute.insert(request)
    compute.stop("us-central1-a", "sl-old-a1")
    stopped = instance(
        "sl-old-a1",
        "old",
        status=InstanceStatus.CLOSED,
        substatus=InstanceSubstatus.STOPPED,
        stopped_at=NOW,
    ).model_copy(update={"zone": "us-central1-a"})
    world.store.create_instance(stopped)
    pages = world.tick()
    [page] = [p for p in pages if "sl-old-a1" in p.names]
    # Restarted for another job meanwhile: live, its VM running.
    world.store.create_job(job("job2", pending_events=[], instance="sl-old-a1"))
    compute.start("us-central1-a", "sl-old-a1")
    restarted = {"status": InstanceStatus.EXECUTING, "substatus": None, "job_id": "job2"}
    world.store.update_instance(
        "sl-old-a1",
        lambda i: i.model_copy(update={**restarted, "last_heartbeat_at": NOW, "booted_at": NOW}),
    )
    world.now += timedelta(seconds=5)
    world.deliver(page)
    kept = world.store.get_instance("sl-old-a1")
    assert kept is not None and kept.status == InstanceStatus.EXECUTING
    assert "sl-old-a1" in world.attempts()[1]


def test_a_stop_a_late_page_began_is_left_to_it_for_the_request_timeout(
    cloud: LocalCloud,
) -> None:
    """A page 55 s after its tick ends a cooling on-demand VM into a stop, and
    the stop call fails (as when its function dies): CLOSING/STOPPING. The
    reaper finishes a stop only ``request_timeout_s`` (120 s) after it began,
    or two stoppers race; stamped with the tick's time, the stop looked begun
    55 s earlier, and a page 66 s after it stopped the VM a second time."""
    world = World(cloud)
    compute, store = world.deps.compute, world.store
    compute.insert(
        VmRequest(
            name="sl-old-a1",
            zone="us-central1-a",
            machine_type="g2-standard-4",
            provisioning=Provisioning.STANDARD,
            request_id="0f1e2d3c-4b5a-4968-8776-655443322110",
            image=world.deps.settings.image,
            labels={"spotline": "true", "spotline-job": "old"},
            accelerators=(Accelerator("nvidia-l4", 1),),
        )
    )
    spec = {"machine_ids": ["g2-standard-4.od"], "stop_period_s": 3600}
    finished = JobSubstatus.COMPLETED
    store.create_job(
        job("old", status=JobStatus.COMPLETED, substatus=finished, spec=spec, pending_events=[])
    )
    cooled = {"zone": "us-central1-a", "provisioning": Provisioning.STANDARD}
    cooling = instance(
        "sl-old-a1",
        "old",
        status=InstanceStatus.COOLING,
        cooling_since=NOW - timedelta(seconds=600),
        cooling_until=NOW,
        segment_started_at=NOW - timedelta(seconds=600),
    ).model_copy(update=cooled)
    store.create_instance(cooling)
    stops = "/instances/sl-old-a1/stop$"

    def page_at(seconds: float, message_id: str) -> InstanceDoc:
        [page] = [p for p in world.tick() if "sl-old-a1" in p.names]
        world.now += timedelta(seconds=seconds)
        world.deliver(page, message_id)
        current = store.get_instance("sl-old-a1")
        assert current is not None
        return current

    cloud.fail_next("POST", stops, 400, "badRequest")
    began = NOW + timedelta(seconds=55)
    left = page_at(55, "p1")
    assert (left.status, left.substatus) == (InstanceStatus.CLOSING, InstanceSubstatus.STOPPING)
    world.now = NOW + timedelta(seconds=120)  # the next ticks: 65 s after the stop began
    left = page_at(1, "p2")
    assert (left.status, left.substatus) == (InstanceStatus.CLOSING, InstanceSubstatus.STOPPING)
    assert len(cloud.requests_to("POST", "/instances/sl-old-a1/stop")) == 1
    world.now = began + timedelta(seconds=world.deps.settings.request_timeout_s)
    done = page_at(1, "p3")  # the stopper must have died: the reaper stops it
    assert (done.status, done.substatus) == (InstanceStatus.CLOSED, InstanceSubstatus.STOPPED)


@pytest.mark.parametrize("meanwhile", ["placed", "gave up"])
def test_a_page_s_place_again_after_the_tick_s_queue_retry_inserts_no_vm(
    cloud: LocalCloud, meanwhile: str
) -> None:
    """The tick retries the queue while pages run: a page decided PlaceAgain on
    a job it read stuck in REQUESTING_SERVER; the tick's retry then placed the
    job (or gave up on it) and deleted its entry; then the page's action runs
    on its old read. It once inserted a VM for the job again (and, for a job
    given up, deleted it at once, at the user's cost)."""
    world = World(cloud)
    world.now += timedelta(seconds=world.deps.settings.request_timeout_s + 1)
    created = world.now if meanwhile == "placed" else NOW - timedelta(days=1)
    stuck = job(
        "job2", substatus=JobSubstatus.REQUESTING_SERVER, status=JobStatus.QUEUING
    ).model_copy(update={"pending_events": [], "created_at": created, "updated_at": NOW})
    world.store.create_job(stuck)
    world.store.put_queue(entry("job2", not_before=NOW))
    stale = world.store.get_job("job2")
    assert stale is not None
    decided = r.decide_jobs([stale], world.deps.settings, world.now)
    assert decided == [r.PlaceAgain(stale)]
    tick(world.deps, world.now)  # its queue stage places job2, or gives up
    settled = world.store.get_job("job2")
    assert settled is not None and settled.substatus != JobSubstatus.REQUESTING_SERVER
    inserts = len(cloud.requests_to("POST", "/instances"))
    apply(world.deps, decided, world.now)  # the page's action, on its old read
    assert len(cloud.requests_to("POST", "/instances")) == inserts
    after = world.store.get_job("job2")
    assert after is not None and (after.status, after.instance) == (
        settled.status,
        settled.instance,
    )
