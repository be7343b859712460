"""Cooling instances through the handlers: kept after a job, claimed by the
same user's next job (one winner), priced while held, ended by the reaper."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotline.functions import deps
from spotline.functions.ops.reuse import claim_cooling
from spotline.functions.ops.teardown import charge_cooling, end_cooling
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import Heartbeat, JobFinished, ReaperTick
from spotline.shared.domain.cooling import charge
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import InstanceStatus, JobSubstatus
from tests.conftest import SPEC, vm_event

pytestmark = pytest.mark.emulators
COOL = {**SPEC, "cool_down_period_s": 600}


def finish_first_job(call: Callable[..., Any]) -> None:
    call("submit_job", "submit", COOL, message_id="s1")
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING"), message_id="h1")
    call("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0), message_id="f1")


def test_a_finished_job_leaves_its_vm_cooling(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    finish_first_job(call)
    instance = FirestoreStore(project).get_instance("sl-job1-a1")
    assert instance is not None and instance.status == InstanceStatus.COOLING
    assert instance.cooling_until is not None and instance.cooling_since is not None
    assert (instance.cooling_until - instance.cooling_since).total_seconds() == 600
    assert [vm["name"] for vm in host.list()] == ["sl-job1-a1"]
    user = FirestoreStore(project).get_user("alice")
    assert user is not None and user.active_jobs == []  # the job's slot is free


def test_the_next_job_of_the_user_reuses_it(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    finish_first_job(call)
    call("submit_job", "submit", {**COOL, "job_id": "job2"}, message_id="s2")
    store = FirestoreStore(project)
    job = store.get_job("job2")
    assert job is not None and job.instance == "sl-job1-a1"
    assert job.substatus == JobSubstatus.CONNECTING_SERVER
    assert [vm["name"] for vm in host.list()] == ["sl-job1-a1"]  # no new VM
    vm = host.get("sl-job1-a1")
    assert vm is not None and '"job_id":"job2"' in vm["metadata"]["spotline-job"]
    instance = store.get_instance("sl-job1-a1")
    assert instance is not None and (instance.status, instance.job_id) == ("EXECUTING", "job2")
    # A redelivered submit adopts the claimed VM again: still one VM.
    call("submit_job", "submit", {**COOL, "job_id": "job2"}, message_id="s2")
    assert len(host.list()) == 1


def test_another_user_or_machine_gets_a_new_vm(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    finish_first_job(call)
    call("submit_job", "submit", {**COOL, "job_id": "job2", "user": "bob"}, message_id="s2")
    other = {**COOL, "job_id": "job3", "machine_ids": ["n1-standard-8-t4"]}
    call("submit_job", "submit", other, message_id="s3")
    assert sorted(vm["name"] for vm in host.list()) == ["sl-job1-a1", "sl-job2-a1", "sl-job3-a1"]


def test_one_cooling_vm_has_one_winner(call: Callable[..., Any], project: str) -> None:
    finish_first_job(call)
    store = FirestoreStore(project)
    spec = JobSpec.model_validate({**COOL, "job_id": None})
    racers = [new_job(spec, f"racer{n}", f"m{n}", datetime.now(UTC)) for n in (1, 2)]
    for racer in racers:  # submitted: the winner keeps its VM's event token on it
        store.create_job(racer)
    winners: list[str] = []

    def race(job: JobDoc) -> None:
        if claim_cooling(deps.current(), job, ["g2-standard-4"], datetime.now(UTC)) is not None:
            winners.append(job.job_id)

    threads = [threading.Thread(target=race, args=(job,)) for job in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1
    instance = store.get_instance("sl-job1-a1")
    assert instance is not None and instance.job_id == winners[0]


def test_ending_a_cooling_vm_while_a_job_claims_it_has_one_winner(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    finish_first_job(call)
    store = FirestoreStore(project)
    cooling = store.get_instance("sl-job1-a1")
    assert cooling is not None
    spec = JobSpec.model_validate({**COOL, "job_id": None})
    racer = new_job(spec, "racer", "m1", datetime.now(UTC))
    store.create_job(racer)  # submitted: a claim keeps its VM's event token on it
    outcome: dict[str, object] = {}

    def claim() -> None:
        outcome["claimed"] = claim_cooling(
            deps.current(), racer, ["g2-standard-4"], datetime.now(UTC)
        )

    def end() -> None:
        outcome["ended"] = end_cooling(deps.current(), cooling, datetime.now(UTC), "ended early")

    threads = [threading.Thread(target=claim), threading.Thread(target=end)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    instance = store.get_instance("sl-job1-a1")
    assert instance is not None
    if outcome["claimed"] is not None:  # the claim won: the VM runs the racer's job
        assert outcome["ended"] is False
        assert (instance.status, instance.job_id) == (InstanceStatus.EXECUTING, "racer")
        assert host.get("sl-job1-a1") is not None
    else:  # the end won: the VM is gone, and no job was handed it
        assert outcome["ended"] is True and instance.status == InstanceStatus.CLOSED
        assert host.get("sl-job1-a1") is None


def test_a_sweep_that_listed_the_vm_running_leaves_it_cooling(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    from spotline.functions.ops.sweep_pages import reap_vms  # the sweep's stage, on a stale listing

    call("submit_job", "submit", COOL, message_id="s1")
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING"), message_id="h1")
    store = FirestoreStore(project)
    listed = store.get_instance("sl-job1-a1")  # listed while its job ran...
    call("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0), message_id="f1")
    assert listed is not None  # ...then the job ended and left it cooling
    vm = deps.current().compute.get(listed.zone, listed.name)
    assert vm is not None
    assert not reap_vms(deps.current(), [listed], [], [vm], datetime.now(UTC))
    instance = store.get_instance("sl-job1-a1")
    assert instance is not None and instance.status == InstanceStatus.COOLING
    assert host.get("sl-job1-a1") is not None


def test_the_reaper_prices_the_cooling_vm_then_ends_it(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    finish_first_job(call)
    store = FirestoreStore(project)
    an_hour_ago = datetime.now(UTC) - timedelta(minutes=60, seconds=5)
    store.update_instance(
        "sl-job1-a1",
        lambda i: i.model_copy(
            update={"cooling_since": an_hour_ago, "segment_started_at": an_hour_ago}
        ),
    )
    call("reaper", "reaper_tick", ReaperTick(), message_id="t1")
    instance = store.get_instance("sl-job1-a1")
    assert instance is not None and instance.status == InstanceStatus.COOLING
    spot, od = instance.base_price_per_hour, instance.on_demand_price_per_hour
    assert instance.price_per_hour == pytest.approx(spot + 0.5 * (od - spot))  # minute 60
    assert instance.cooling_cost_usd > spot  # an hour, partly escalated

    ended = store.update_instance(
        "sl-job1-a1",
        lambda i: i.model_copy(update={"cooling_until": datetime.now(UTC) - timedelta(seconds=1)}),
    )
    assert ended is not None
    # A sweep that charged the job and crashed before closing the instance:
    # the next sweep charges it again, which must not add up.
    charge_cooling(deps.current(), ended, datetime.now(UTC))
    call("reaper", "reaper_tick", ReaperTick(), message_id="t2")
    instance = store.get_instance("sl-job1-a1")
    assert instance is not None and (instance.status, instance.substatus) == (
        "CLOSED",
        "TERMINATED",
    )
    assert host.list() == []
    job = store.get_job("job1")
    assert job is not None and job.cooling_cost_usd == pytest.approx(instance.cooling_cost_usd)
    assert job.cooling_charges == {"sl-job1-a1": job.cooling_cost_usd}
    assert job.cost_usd >= job.cooling_cost_usd


def test_a_claimed_cooling_period_is_charged_once(call: Callable[..., Any], project: str) -> None:
    finish_first_job(call)
    store = FirestoreStore(project)
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    store.update_instance(
        "sl-job1-a1",
        lambda i: i.model_copy(
            update={"cooling_since": an_hour_ago, "segment_started_at": an_hour_ago}
        ),
    )
    call("submit_job", "submit", {**COOL, "job_id": "job2"}, message_id="s2")
    instance = store.get_instance("sl-job1-a1")
    first = store.get_job("job1")
    assert instance is not None and first is not None
    assert instance.cooled_for_job == "job1" and instance.cooling_cost_usd > 0
    assert first.cooling_charges == {"sl-job1-a1": instance.cooling_cost_usd}
    # A redelivered submit finds the VM claimed already: no second charge.
    call("submit_job", "submit", {**COOL, "job_id": "job2"}, message_id="s2")
    again = store.get_job("job1")
    assert again is not None
    assert (again.cooling_cost_usd, again.cost_usd) == (first.cooling_cost_usd, first.cost_usd)


def test_a_charge_is_set_per_instance_and_only_grows() -> None:
    spec = JobSpec.model_validate(COOL)
    job = new_job(spec, "job1", "m1", datetime.now(UTC))
    job = charge(charge(job, "vm-a", 0.5), "vm-b", 0.25)
    assert job.cooling_cost_usd == 0.75
    assert charge(job, "vm-a", 0.5) == job  # repeated
    assert charge(job, "vm-a", 0.4) == job  # stale: an earlier sweep's price
    assert charge(job, "vm-a", 0.6).cooling_cost_usd == 0.85


def test_cooling_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTLINE_COOLING_BASELINE_MIN", "5")
    deps.reset()
    assert deps.current().settings.cooling_rule.baseline_min == 5
    deps.reset()
