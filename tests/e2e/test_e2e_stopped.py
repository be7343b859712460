"""Stopped on-demand VMs on the whole local stack: a finished job's VM is
stopped, the user's next job boots it again, and the reaper deletes it when
its stop period ends."""

from __future__ import annotations

import time

import pytest

from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localstack.stack import LocalStack
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.states import JobStatus
from tests.e2e.test_e2e_cooling import first_epoch_s
from tests.e2e.test_e2e_recovery import submit

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]


def wait_for_instance(
    store: FirestoreStore, name: str, state: tuple[str, str], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while (instance := store.get_instance(name)) and (instance.status, instance.substatus) != state:
        assert time.monotonic() < deadline, f"{name} still {instance.status}/{instance.substatus}"
        time.sleep(0.1)


def test_the_next_job_boots_the_stopped_vm(local_stack: LocalStack) -> None:
    host = local_stack.cloud
    assert host is not None
    store = FirestoreStore(local_stack.options.project)
    spec = {"user": "dave", "machine_ids": ["g2-standard-4.od"], "stop_period_s": 20, "epochs": 2}

    first_id = submit(local_stack, **spec)
    first = wait_for_job(store, first_id, 180, echo=False)
    assert first.status == JobStatus.COMPLETED, first.error
    assert first.instance is not None
    wait_for_instance(store, first.instance, ("CLOSED", "STOPPED"), timeout_s=15)
    vm = host.get(first.instance)
    assert vm is not None and vm["state"] == "TERMINATED"  # stopped, disk kept

    second_id = submit(local_stack, **spec, seed=11)
    second = wait_for_job(store, second_id, 180, echo=False)
    assert second.status == JobStatus.COMPLETED, second.error
    assert second.instance == first.instance  # the same VM, booted again
    assert second.metrics == store.list_epochs(second_id)[-1].metrics
    new_vm_s, restarted_s = first_epoch_s(store, first_id), first_epoch_s(store, second_id)
    # A measurement, not a check: BENCHMARKS.md reports it.
    print(f"\nsubmit -> first epoch: new VM {new_vm_s:.2f} s, restarted VM {restarted_s:.2f} s")

    # Stopped again after the second job; deleted once the period ends.
    wait_for_instance(store, first.instance, ("CLOSED", "TERMINATED"), timeout_s=60)
    # The reaper ends the document first (a guarded write a restart cannot
    # race), then deletes the VM: the delete follows within its API call.
    deadline = time.monotonic() + 15
    while host.get(first.instance) is not None:
        assert time.monotonic() < deadline, f"{first.instance} ended but its VM is still there"
        time.sleep(0.1)
    # ...and frees the user's stopped slot after the delete returns.
    deadline = time.monotonic() + 10
    while (user := store.get_user("dave")) and user.stopped_instances:
        assert time.monotonic() < deadline, f"stopped slots still held: {user.stopped_instances}"
        time.sleep(0.1)
    assert user is not None and user.stopped_instances == []
