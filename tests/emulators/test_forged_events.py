"""VM events bound to their job and attempt.

A VM holds the event token of its own attempt only. Whatever another VM sends
in a job's name (its own valid token, no token, the token of the job's earlier
attempt), nothing of that job changes; a preemption log entry acts only on the
VM of the current attempt, with the numeric id on record. Through the real
functions-framework handlers, on the Firestore and Pub/Sub emulators, with the
local cloud's VMs (records).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import (
    EpochDone,
    Heartbeat,
    JobFinished,
    SpotPreempted,
    VmBooted,
)
from spotline.shared.domain.errors import TransientError
from spotline.shared.domain.vms import EVENT_TOKEN_METADATA_KEY, JOB_METADATA_KEY, Vm, VmRequest
from spotline.shared.ports.compute import Compute
from tests.conftest import SPEC, vm_event
from tests.event_tokens import token_for, tokens_for, vm_token
from tests.hostile import log_records

pytestmark = pytest.mark.emulators
A, B = "joba", "jobb"
VM_A, VM_B = "sl-joba-a1", "sl-jobb-a1"


def training(call: Callable[..., Any], job_id: str, attempt: int = 1) -> None:
    """Submit ``job_id`` (attempt 1) and bring it to TRAINING with one epoch."""
    if attempt == 1:
        call("submit_job", "submit", {**SPEC, "job_id": job_id}, message_id=f"s-{job_id}")
    ids = {"job_id": job_id, "attempt": attempt, "instance": f"sl-{job_id}-a{attempt}"}
    for target, topic, event in (
        ("on_vm_booted", "vm_booted", vm_event(VmBooted, zone="us-central1-a", **ids)),
        ("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING", **ids)),
        ("on_epoch_done", "epoch_done", vm_event(EpochDone, epoch=1, epochs=3, step=45, **ids)),
    ):
        assert (
            call(target, topic, event, message_id=f"{job_id}-{attempt}-{topic}").status_code == 200
        )
    job = FirestoreStore(_project()).get_job(job_id)
    assert job is not None and (job.substatus, job.epoch, job.attempt) == ("TRAINING", 1, attempt)


def _project() -> str:
    """The running test's project on the emulators (the `project` fixture sets it)."""
    return os.environ["SPOTLINE_PROJECT"]


def state_of(host: LocalCloud, job_id: str) -> dict[str, Any]:
    """Everything of the job an event could change: its document, its
    instances, its epochs, its queue entry, its VMs."""
    store = FirestoreStore(_project())
    job = store.get_job(job_id)
    assert job is not None
    return {
        "job": job.model_dump(),
        "instances": [i.model_dump() for i in store.instances_of_job(job_id)],
        "epochs": [e.model_dump() for e in store.list_epochs(job_id)],
        "queue": store.get_queue(job_id),
        "vms": sorted(
            (vm["name"], vm["state"], tuple(sorted(vm["metadata"].items())))
            for vm in host.list()
            if vm["name"].startswith(f"sl-{job_id}-")
        ),
    }


def dropped(out: str) -> list[dict[str, Any]]:
    return [r for r in log_records(out) if r.get("error_type") == "ForgedEvent"]


def forgeries(**ids: Any) -> list[tuple[str, str, Any]]:
    """EpochDone, JobFinished (exit 0) and SpotPreempted with ``ids``."""
    return [
        ("on_epoch_done", "epoch_done", vm_event(EpochDone, epoch=3, epochs=3, step=99, **ids)),
        ("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0, **ids)),
        ("on_spot_preempted", "spot_preempted", vm_event(SpotPreempted, step=99, **ids)),
    ]


def test_events_forged_from_another_jobs_vm_change_nothing(
    call: Callable[..., Any], host: LocalCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    training(call, A)
    training(call, B)
    stolen = vm_token(host, VM_B)  # what B's VM reads from its metadata
    assert stolen and stolen != vm_token(host, VM_A)
    before = state_of(host, A)
    capsys.readouterr()
    a_ids = {"job_id": A, "attempt": 1, "instance": VM_A, "token": stolen}
    for n, (target, topic, event) in enumerate(forgeries(**a_ids)):
        assert call(target, topic, event, message_id=f"forged-{n}").status_code == 200
    assert state_of(host, A) == before
    refusals = dropped(capsys.readouterr().out)
    assert len(refusals) == 3
    for record in refusals:
        text = record["message"]
        assert f"job {A} attempt 1" in text and VM_A in text and "token is not one" in text
        assert stolen not in text
    # B's own job id with B's valid token, naming A's VM: the token is B's, the
    # VM is not; a SpotPreempted of it must not preempt A.
    b_ids = {"job_id": B, "attempt": 1, "instance": VM_A, "token": stolen}
    for n, (target, topic, event) in enumerate(forgeries(**b_ids)):
        assert call(target, topic, event, message_id=f"b-names-a-{n}").status_code == 200
    assert state_of(host, A) == before


BARE = [
    (VmBooted, "on_vm_booted", "vm_booted", {"zone": "us-central1-b", "instance_id": "1"}),
    (Heartbeat, "on_epoch_done", "epoch_done", {"phase": "RETURNING", "step": 50}),
    (EpochDone, "on_epoch_done", "epoch_done", {"epoch": 2, "epochs": 3, "step": 90}),
    (JobFinished, "on_job_finished", "job_finished", {"exit_code": 0}),
    (SpotPreempted, "on_spot_preempted", "spot_preempted", {"step": 90}),
]


@pytest.mark.parametrize(
    ("kind", "target", "topic", "fields"), BARE, ids=[c[0].__name__ for c in BARE]
)
def test_an_event_without_a_token_changes_nothing(
    call: Callable[..., Any],
    host: LocalCloud,
    capsys: pytest.CaptureFixture[str],
    kind: type,
    target: str,
    topic: str,
    fields: dict[str, Any],
) -> None:
    training(call, A)
    before = state_of(host, A)
    capsys.readouterr()
    event = vm_event(kind, job_id=A, instance=VM_A, token="", **fields)
    assert call(target, topic, event, message_id="bare").status_code == 200
    assert state_of(host, A) == before
    [record] = dropped(capsys.readouterr().out)
    assert "carries no token" in record["message"] and VM_A in record["message"]


def test_a_token_of_the_previous_attempt_is_refused_for_the_current_one(
    call: Callable[..., Any], host: LocalCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    training(call, A)
    first = vm_token(host, VM_A)
    preempted = vm_event(SpotPreempted, job_id=A, instance=VM_A, step=45)
    assert call("on_spot_preempted", "spot_preempted", preempted, message_id="p").status_code == 200
    training(call, A, attempt=2)
    assert token_for(host, A, 2) not in ("", first)
    before = state_of(host, A)
    capsys.readouterr()
    ids = {"job_id": A, "attempt": 2, "instance": "sl-joba-a2", "token": first}
    for n, (target, topic, event) in enumerate(forgeries(**ids)):
        assert call(target, topic, event, message_id=f"old-token-{n}").status_code == 200
    assert state_of(host, A) == before
    assert len(dropped(capsys.readouterr().out)) == 3
    # The previous attempt's own late event still authenticates; the lifecycle
    # then decides: attempt 2 already trains, so attempt 1's finish is only a
    # note in the history (spotline.shared.domain.late_finish) and attempt 2 carries on.
    late = vm_event(JobFinished, job_id=A, instance=VM_A, exit_code=0)
    assert late.token == first
    assert call("on_job_finished", "job_finished", late, message_id="late").status_code == 200
    records = log_records(capsys.readouterr().out)
    assert not [r for r in records if r.get("error_type") == "ForgedEvent"]
    after = state_of(host, A)
    assert {k: v for k, v in after.items() if k != "job"} == {
        k: v for k, v in before.items() if k != "job"
    }
    job = after["job"]
    assert (job["attempt"], job["status"]) == (2, "TRAINING")
    assert "after its loss was recorded" in job["history"][-1]["note"]


class LostReplyCompute:
    """Compute Engine as a crash leaves it: the first insert is made but its
    reply never comes back (the function dies), and the next listing does not
    show the new VM yet (the list lags the insert). Everything else is the
    real adapter on the local cloud."""

    def __init__(self, inner: Compute) -> None:
        self.inner = inner
        self.inserts = 0
        self.lagging = False

    def insert(self, request: VmRequest) -> Vm:
        self.inserts += 1
        vm = self.inner.insert(request)
        if self.inserts == 1:
            self.lagging = True
            raise TransientError("the function died after its insert")
        return vm

    def list(self, labels: dict[str, str]) -> list[Vm]:
        if self.lagging:
            self.lagging = False
            return []
        return self.inner.list(labels)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_vm_made_by_an_earlier_run_of_its_placement_keeps_a_valid_token(
    call: Callable[..., Any], host: LocalCloud, project: str
) -> None:
    """The submit dies after its insert; its redelivery places the same attempt
    again with a new token, and Compute Engine answers the repeated requestId
    with the VM the first run made, which holds the first run's token."""
    process = deps.current()
    compute = LostReplyCompute(process.compute)
    deps._current = deps.Deps(process.settings, compute=compute)
    spec = {**SPEC, "job_id": A}
    assert call("submit_job", "submit", spec, message_id="s").status_code == 500
    assert call("submit_job", "submit", spec, message_id="s").status_code == 200
    first, second = tokens_for(host, A, 1)
    assert first != second and compute.inserts == 2
    assert vm_token(host, VM_A) == first  # the VM the first run made
    job = FirestoreStore(project).get_job(A)
    assert job is not None and job.instance == VM_A and len(job.event_token_hashes["1"]) == 2
    for n, (target, topic, event) in enumerate(
        [
            ("on_vm_booted", "vm_booted", vm_event(VmBooted, job_id=A, instance=VM_A, token=first)),
            ("on_epoch_done", "epoch_done", vm_event(Heartbeat, job_id=A, instance=VM_A,
                                                      phase="TRAINING", token=first)),
        ]
    ):  # fmt: skip
        assert call(target, topic, event, message_id=f"e{n}").status_code == 200
    job = FirestoreStore(project).get_job(A)
    assert job is not None and job.substatus == "TRAINING"


def test_a_claimed_cooling_vm_gets_the_next_jobs_token_with_its_job(
    call: Callable[..., Any], host: LocalCloud, project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cool = {**SPEC, "cool_down_period_s": 600}
    call("submit_job", "submit", {**cool, "job_id": A}, message_id="s1")
    a_token = vm_token(host, VM_A)
    ids = {"job_id": A, "instance": VM_A}
    call("on_epoch_done", "epoch_done", vm_event(Heartbeat, phase="TRAINING", **ids))
    call("on_job_finished", "job_finished", vm_event(JobFinished, exit_code=0, **ids))
    call("submit_job", "submit", {**cool, "job_id": B}, message_id="s2")
    vm = host.get(VM_A)
    assert vm is not None and json.loads(vm["metadata"][JOB_METADATA_KEY])["job_id"] == B
    b_token = vm["metadata"][EVENT_TOKEN_METADATA_KEY]
    assert b_token not in (a_token, "") and b_token == token_for(host, B, 1)
    assert b_token not in vm["metadata"][JOB_METADATA_KEY]  # not in the printed assignment
    store = FirestoreStore(project)
    job_a = store.get_job(A)
    assert job_a is not None
    capsys.readouterr()
    # The VM, now B's, cannot speak for A with B's token ...
    forged = vm_event(JobFinished, exit_code=1, token=b_token, **ids)
    assert call("on_job_finished", "job_finished", forged, message_id="x").status_code == 200
    assert len(dropped(capsys.readouterr().out)) == 1
    assert store.get_job(A) == job_a
    # ... and speaks for B with it.
    beat = vm_event(Heartbeat, job_id=B, instance=VM_A, phase="TRAINING", token=b_token)
    assert call("on_epoch_done", "epoch_done", beat, message_id="b").status_code == 200
    job_b = store.get_job(B)
    assert job_b is not None and job_b.substatus == "TRAINING"


def log_entry(name: str, instance_id: str, zone: str = "us-central1-a") -> dict[str, Any]:
    """Cloud Logging's audit entry for a preemption, as the sink publishes it."""
    return {
        "protoPayload": {
            "methodName": "compute.instances.preempted",
            "resourceName": f"projects/p/zones/{zone}/instances/{name}",
        },
        "resource": {"type": "gce_instance", "labels": {"zone": zone, "instance_id": instance_id}},
    }


def test_a_preemption_log_entry_of_a_re_created_vm_of_the_same_name_changes_nothing(
    call: Callable[..., Any], host: LocalCloud, project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    training(call, A)
    instance = FirestoreStore(project).get_instance(VM_A)
    assert instance is not None and instance.instance_id
    before = state_of(host, A)
    capsys.readouterr()
    other = str(int(instance.instance_id) + 1)
    for message_id, entry in (("l1", log_entry(VM_A, other)), ("l2", log_entry(VM_A, ""))):
        assert (
            call("on_spot_preempted", "spot_preempted", entry, message_id=message_id).status_code
            == 200
        )
    assert state_of(host, A) == before
    reasons = [r["message"] for r in log_records(capsys.readouterr().out) if r.get("error_type")]
    assert len(reasons) == 2 and all("not " + instance.instance_id in r for r in reasons)
    # The entry of the VM on record acts.
    entry = log_entry(VM_A, instance.instance_id)
    assert call("on_spot_preempted", "spot_preempted", entry, message_id="l3").status_code == 200
    job = FirestoreStore(project).get_job(A)
    assert job is not None and (job.attempt, job.preemptions) == (2, 1)


def test_a_forged_log_entry_for_a_vm_whose_id_is_not_recorded_changes_nothing(
    call: Callable[..., Any], host: LocalCloud, project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Anyone who may publish on the preemption topic can write a log entry.
    Where spotline has no id on record for the VM (it was not read back when
    made, and has not booted yet), Compute Engine is asked for it."""
    training(call, A)
    store = FirestoreStore(project)
    recorded = store.get_instance(VM_A)
    assert recorded is not None and recorded.instance_id
    store.update_instance(VM_A, lambda doc: doc.model_copy(update={"instance_id": None}))
    before = state_of(host, A)
    capsys.readouterr()
    forged = str(int(recorded.instance_id) + 7)
    for message_id, entry in (("f1", log_entry(VM_A, forged)), ("f2", log_entry(VM_A, ""))):
        assert (
            call("on_spot_preempted", "spot_preempted", entry, message_id=message_id).status_code
            == 200
        )
    assert state_of(host, A) == before
    reasons = [r["message"] for r in log_records(capsys.readouterr().out) if r.get("error_type")]
    assert len(reasons) == 2
    assert all(f"is not {recorded.instance_id}, Compute Engine's id" in r for r in reasons)
    # The entry Compute Engine's own id confirms acts.
    entry = log_entry(VM_A, recorded.instance_id)
    assert call("on_spot_preempted", "spot_preempted", entry, message_id="f3").status_code == 200
    job = store.get_job(A)
    assert job is not None and (job.attempt, job.preemptions) == (2, 1)


def test_a_preemption_log_entry_of_an_earlier_attempts_vm_changes_nothing(
    call: Callable[..., Any], host: LocalCloud, project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    training(call, A)
    old = FirestoreStore(project).get_instance(VM_A)
    assert old is not None and old.instance_id
    preempted = vm_event(SpotPreempted, job_id=A, instance=VM_A, step=45)
    call("on_spot_preempted", "spot_preempted", preempted, message_id="p")
    training(call, A, attempt=2)
    before = state_of(host, A)
    capsys.readouterr()
    entry = log_entry(VM_A, old.instance_id)
    assert call("on_spot_preempted", "spot_preempted", entry, message_id="l").status_code == 200
    assert state_of(host, A) == before
    [record] = [r for r in log_records(capsys.readouterr().out) if r.get("error_type")]
    assert "current attempt is attempt 2" in record["message"]


def test_a_refused_event_logs_no_token(
    call: Callable[..., Any], host: LocalCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    """A VM event that fails validation is logged with the start of its
    payload: the token in it is not."""
    training(call, A)
    token = vm_token(host, VM_A)
    bad = {"token": token, "job_id": A, "attempt": 1, "instance": VM_A, "exit_code": "x"}
    assert call("on_job_finished", "job_finished", bad, message_id="bad").status_code == 200
    out = capsys.readouterr().out
    assert "exit_code" in out and token not in out
