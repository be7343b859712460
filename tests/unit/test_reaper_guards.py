"""The reaper's apply step on the in-memory store, no emulator: each race
guard re-reads what the sweep's listing may have missed, and a failing
action does not stop the sweep."""

from __future__ import annotations

from spotline.functions.deps import Deps
from spotline.functions.ops.sweep_apply import apply
from spotline.shared.adapters.memory_store import InMemoryStore
from spotline.shared.domain import reaping as r
from spotline.shared.domain.cooling import while_cooling
from spotline.shared.domain.documents import AttemptRecord, JobDoc
from spotline.shared.domain.lifecycle import accrue
from spotline.shared.domain.liveness import PREEMPTION_NOTICE_S
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus, JobSubstatus
from spotline.shared.settings import Settings
from tests.documents import T0, at, instance, job, user, vm

I = InstanceStatus  # noqa: E741


def world() -> tuple[Deps, InMemoryStore]:
    """Compute is never built here: a guard that let an action through to a
    VM would fail on the empty endpoint, and the count would say so."""
    store = InMemoryStore()
    return Deps(Settings(project="guards"), store=store), store


def test_an_instance_that_moved_on_since_the_listing_is_not_released() -> None:
    deps, store = world()
    listed = instance()
    store.create_instance(listed.model_copy(update={"status": I.COOLING}))  # its job ended
    assert apply(deps, [r.Release(listed)], at(1)) == {}
    current = store.get_instance(listed.name)
    assert current is not None and current.status == I.COOLING


def test_a_vm_restarted_since_the_listing_is_no_orphan() -> None:
    deps, store = world()
    listed = vm(labels={"spotline-job": "job1", "spotline-attempt": "1"})
    store.create_instance(instance(job_id="job2", status=I.LAUNCHING))
    assert apply(deps, [r.DeleteOrphan(listed)], at(1)) == {}


def test_a_vm_whose_placement_began_since_the_listing_is_no_orphan() -> None:
    deps, store = world()
    listed = vm(labels={"spotline-job": "job1", "spotline-attempt": "1"})
    store.create_job(job(substatus=JobSubstatus.REQUESTING_SERVER, status=JobStatus.QUEUING))
    assert apply(deps, [r.DeleteOrphan(listed)], at(1)) == {}


def test_a_cooling_vm_claimed_since_the_listing_is_not_ended() -> None:
    deps, store = world()
    listed = instance(status=I.COOLING, cooling_since=T0, cooling_until=at(60))
    store.create_instance(instance(job_id="job2", status=I.EXECUTING))  # claimed
    actions: list[r.Action] = [r.EndCooling(listed), r.LoseCooling(listed)]
    assert apply(deps, actions, at(61)) == {"cooling": 2}
    current = store.get_instance(listed.name)
    assert current is not None and (current.status, current.job_id) == (I.EXECUTING, "job2")


def test_a_stopped_vm_restarted_since_the_listing_is_kept() -> None:
    deps, store = world()
    stopped = instance(status=I.CLOSED, substatus=InstanceSubstatus.STOPPED, stopped_until=at(10))
    store.create_instance(instance(job_id="job2", status=I.LAUNCHING))  # restarted
    assert apply(deps, [r.EndStopped(stopped)], at(11)) == {}
    current = store.get_instance(stopped.name)
    assert current is not None and current.status == I.LAUNCHING


def test_an_instance_slot_taken_by_a_placement_that_finished_meanwhile_is_kept() -> None:
    deps, store = world()
    store.update_user("alice", lambda u: user(active_instances=("sl-job2-a1", "sl-gone-a1")))
    store.create_job(job("job2", substatus=JobSubstatus.CONNECTING_SERVER))
    store.create_instance(instance("sl-job2-a1", "job2", status=I.LAUNCHING))
    actions = [r.FreeInstanceSlot("alice", "sl-job2-a1"), r.FreeInstanceSlot("alice", "sl-gone-a1")]
    assert apply(deps, actions, at(1)) == {"slots_freed": 1}
    held = store.get_user("alice")
    assert held is not None and held.active_instances == ["sl-job2-a1"]


def test_a_stopped_slot_of_a_vm_stopped_meanwhile_is_kept() -> None:
    deps, store = world()
    store.update_user("alice", lambda u: user(stopped_instances=("a", "b")))
    store.create_instance(instance("a", status=I.CLOSED, substatus=InstanceSubstatus.STOPPED))
    actions = [r.FreeStoppedSlot("alice", "a"), r.FreeStoppedSlot("alice", "b")]
    assert apply(deps, actions, at(1)) == {"slots_freed": 1}
    held = store.get_user("alice")
    assert held is not None and held.stopped_instances == ["a"]


def test_a_failing_action_is_counted_and_the_sweep_goes_on() -> None:
    deps, store = world()
    store.update_user("alice", lambda u: user(stopped_instances=("b",)))
    gone = job("gone")  # never stored: canceling it is a permanent error
    actions: list[r.Action] = [r.Cancel(gone, "max"), r.FreeStoppedSlot("alice", "b")]
    assert apply(deps, actions, at(1)) == {"skipped": 1, "slots_freed": 1}


def test_a_vm_closed_preempted_is_kept_through_its_notice() -> None:
    """The log sink's report closed the instance PREEMPTED at T0 and kept the
    VM (it saves its state); a listing that showed the VM owned by nothing
    must not delete it before the notice is over."""
    deps, store = world()
    listed = vm(labels={"spotline-job": "job1", "spotline-attempt": "1"})
    store.create_instance(
        instance(status=I.CLOSED, substatus=InstanceSubstatus.PREEMPTED, closed_at=T0)
    )
    assert apply(deps, [r.DeleteOrphan(listed)], at(PREEMPTION_NOTICE_S)) == {}


# -- a page decides as of its tick, up to reaper_page_max_age_s late: its
# writes must not move what a later writer priced back to the tick's time --


def _running() -> JobDoc:
    started = AttemptRecord(
        attempt=1,
        instance="sl-job1-a1",
        zone="local-a",
        machine_id="g2-standard-4",
        started_at=T0,
        price_per_hour=3.6,  # a tenth of a cent a second
        on_demand_price_per_hour=7.2,
    )
    return job(attempts=[started], pending_events=[])


def test_an_older_page_s_accrual_does_not_price_a_job_back_in_time() -> None:
    """Two ticks' pages at once: the older one read the job unpriced and
    decided Accrue; the newer one (or a preemption's end_attempt) priced it at
    100 s first. The older page's write at its tick's 50 s lowered the cost
    from 0.10 to 0.05 and put cost_as_of back by 50 s."""
    deps, store = world()
    listed = _running()
    store.create_job(accrue(listed, at(100)))
    apply(deps, [r.Accrue(listed)], at(50))
    current = store.get_job("job1")
    assert current is not None
    assert (current.cost_usd, current.cost_as_of) == (0.1, at(100))


def test_an_accrual_still_prices_a_job_priced_before_the_page_s_tick() -> None:
    deps, store = world()
    listed = _running()
    store.create_job(accrue(listed, at(20)))
    apply(deps, [r.Accrue(listed)], at(50))
    current = store.get_job("job1")
    assert current is not None
    assert (current.cost_usd, current.cost_as_of) == (0.05, at(50))


def test_an_older_page_does_not_price_a_cooling_vm_back_in_time() -> None:
    """A newer page priced the cooling VM at 100 s; the older page's
    PriceCooling at its tick's 50 s put its cooling cost, price and
    updated_at back."""
    deps, store = world()
    rule = deps.settings.cooling_rule
    cooling = instance(
        status=I.COOLING,
        cooling_since=T0,
        cooling_until=at(600),
        segment_started_at=T0,
        base_price_per_hour=3.6,
        on_demand_price_per_hour=7.2,
    )
    newer = while_cooling(cooling, at(100), rule)
    store.create_instance(newer)
    assert apply(deps, [r.PriceCooling(cooling)], at(50)) == {"cooling": 1}
    current = store.get_instance(cooling.name)
    assert current is not None
    assert (current.cooling_cost_usd, current.price_per_hour, current.updated_at) == (
        newer.cooling_cost_usd,
        newer.price_per_hour,
        at(100),
    )
