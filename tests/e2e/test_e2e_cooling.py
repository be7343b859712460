"""Cooling reuse on the whole local stack: the agent idles after its job and
runs the user's next job on the same VM, with no gear-up."""

from __future__ import annotations

import time

import pytest

from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from tests.e2e.test_e2e_recovery import submit, wait_no_vms

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]


def first_epoch_s(store: FirestoreStore, job_id: str) -> float:
    """Submit (job created) to the first epoch recorded."""
    job = store.get_job(job_id)
    epochs = store.list_epochs(job_id)
    assert job is not None and epochs
    return (epochs[0].at - job.created_at).total_seconds()


def test_the_next_job_runs_on_the_cooling_vm(local_stack: LocalStack) -> None:
    assert local_stack.cloud is not None
    store = FirestoreStore(local_stack.options.project)
    cooling = {"user": "carol", "cool_down_period_s": 20, "epochs": 2}

    first_id = submit(local_stack, **cooling)
    first = wait_for_job(store, first_id, 180, echo=False)
    assert first.status == JobStatus.COMPLETED, first.error
    deadline = time.monotonic() + 15
    while (instance := store.get_instance(first.instance or "")) and instance.status != "COOLING":
        assert time.monotonic() < deadline, "the VM never started cooling"
        time.sleep(0.1)

    second_id = submit(local_stack, **cooling, seed=11)
    second = wait_for_job(store, second_id, 180, echo=False)

    assert second.status == JobStatus.COMPLETED, second.error
    assert second.instance == first.instance  # the same VM, no new one
    steps = [h.substatus for h in second.history]
    assert "GEARING_UP_ENV" not in steps  # no gear-up on a cooling VM
    # Its metrics are its own, not the previous job's reports replayed (a
    # replayed last epoch would block its own from the job document).
    assert second.metrics == store.list_epochs(second_id)[-1].metrics
    assert second.metrics != first.metrics
    assert steps[:3] == ["REQUESTING_SERVER", "CONNECTING_SERVER", "SENDING_MODEL_AND_DATA"]
    new_vm_s, cooling_vm_s = first_epoch_s(store, first_id), first_epoch_s(store, second_id)
    # A measurement, not a check (timings on a shared machine are noise):
    # BENCHMARKS.md reports it.
    print(f"\nsubmit -> first epoch: new VM {new_vm_s:.2f} s, cooling VM {cooling_vm_s:.2f} s")
    # The period ends after the second job too: the reaper deletes the VM,
    # then closes the instance.
    wait_no_vms(local_stack, first_id, timeout_s=60)
    deadline = time.monotonic() + 10
    while (instance := store.get_instance(first.instance or "")) and instance.status != "CLOSED":
        assert time.monotonic() < deadline, f"instance still {instance.status}"
        time.sleep(0.1)
    assert instance is not None
    assert store.get_job(second_id).cooling_cost_usd > 0  # type: ignore[union-attr]
