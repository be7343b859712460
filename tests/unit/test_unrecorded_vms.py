"""Charging a job for a VM none of its attempts recorded
(``spotline.shared.domain.unrecorded_vms``), pure: once per VM name, never for a VM
its job counts already or is still placing, never a negative time."""

from __future__ import annotations

from dataclasses import replace

from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.lifecycle import vm_recorded
from spotline.shared.domain.pricing import vm_cost
from spotline.shared.domain.states import JobStatus, JobSubstatus
from spotline.shared.domain.unrecorded_vms import (
    MadeVm,
    charge_unrecorded,
    made_from_instance,
    made_from_listing,
)
from spotline.shared.domain.vms import Vm, VmState
from tests.documents import at, instance, job

SPOT = load_catalog()["g2-standard-4"].spot_usd_per_hour
MADE = MadeVm("job1", 1, "sl-job1-a1", "local-a", "g2-standard-4", at(0), SPOT, 0.7)


def test_an_ended_job_pays_for_the_vm_from_its_creation_to_its_delete_once() -> None:
    ended = job(status=JobStatus.CANCELED, substatus=JobSubstatus.CANCELED, instance=None)
    charged = charge_unrecorded(ended, MADE, at(600))
    assert charged.cost_usd == round(vm_cost(SPOT, 600), 6) > 0
    assert charged.on_demand_cost_usd == round(vm_cost(0.7, 600), 6)
    [record] = charged.unrecorded_vms
    assert (record.instance, record.attempt, record.outcome) == ("sl-job1-a1", 1, "canceled")
    # A second delete, later: nothing more.
    assert charge_unrecorded(charged, MADE, at(900)) == charged


def test_a_vm_its_job_counts_or_still_places_is_not_charged() -> None:
    placing = job(substatus=JobSubstatus.REQUESTING_SERVER, status=JobStatus.QUEUING)
    assert charge_unrecorded(placing, MADE, at(60)) == placing
    recorded = vm_recorded(placing, "sl-job1-a1", "local-a", "g2-standard-4", at(5), SPOT)
    ended = recorded.model_copy(update={"status": JobStatus.COMPLETED})
    assert charge_unrecorded(ended, MADE, at(60)) == ended
    gang = recorded.model_copy(
        update={"attempts": [recorded.attempts[0].model_copy(update={"node_names": ["n0", "n1"]})]}
    )
    assert charge_unrecorded(gang, replace(MADE, name="n1"), at(60)) == gang


def test_a_vm_of_an_attempt_the_job_moved_past_is_charged() -> None:
    moved_on = job(attempt=2)
    charged = charge_unrecorded(moved_on, MADE, at(60))
    assert [(r.attempt, r.outcome) for r in charged.unrecorded_vms] == [(1, "replaced")]


def test_clocks_apart_never_charge_a_negative_time() -> None:
    ended = job(status=JobStatus.CANCELED, substatus=JobSubstatus.CANCELED, instance=None)
    charged = charge_unrecorded(ended, replace(MADE, created_at=at(30)), at(0))
    assert charged.cost_usd == 0 and charged.unrecorded_vms[0].ended_at == at(30)


def test_a_vm_is_read_from_its_labels_or_its_instance_when_it_was_made_for_them() -> None:
    labels = {
        "spotline-job": "job1",
        "spotline-attempt": "1",
        "spotline-machine": "g2-standard-4",
        "spotline-provisioning": "spot",
    }
    listed = Vm("sl-job1-a1", "local-a", VmState.RUNNING, labels, created_at=at(0))
    assert made_from_listing(listed, load_catalog()) == replace(
        MADE, on_demand_price_per_hour=(load_catalog()["g2-standard-4"].on_demand_usd_per_hour)
    )
    assert made_from_listing(replace(listed, created_at=None), load_catalog()) is None
    assert made_from_listing(replace(listed, name="sl-job2-a1"), load_catalog()) is None
    doc = instance(vm_created_at=at(0), base_price_per_hour=SPOT, on_demand_price_per_hour=0.7)
    assert made_from_instance(doc) == MADE
    # A cooling VM job2 claimed: made for job1, its minutes are no unrecorded VM's.
    assert made_from_instance(instance(job_id="job2")) is None
