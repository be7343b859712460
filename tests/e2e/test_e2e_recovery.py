"""Spot recovery on the whole local stack: real agent, real trainer, real
preemption notices, kills and hangs of the local "VMs"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fsspec.core import url_to_fs

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.demo import wait_for_job
from spotline.infra.localcloud.chaos_client import ChaosClient
from spotline.infra.localstack.stack import LocalStack
from spotline.infra.localstack.storage import BUCKET
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.pubsub_bus import PubsubBus
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import job_id_for
from spotline.shared.domain.spec import parse_spec
from spotline.shared.domain.states import JobStatus

pytestmark = [pytest.mark.emulators, pytest.mark.e2e]
HYPER = {"lr": 0.01, "hidden": 64}


def submit(stack: LocalStack, **fields: Any) -> str:
    spec = {
        "user": "bob",
        "machine_ids": ["g2-standard-4"],
        "trainer": "digits_mlp",
        "epochs": 4,
        "batch_size": 32,
        "seed": 3,
        "hyperparameters": {**HYPER, "step_time_s": 0.02},
        **fields,
    }
    data = json.dumps(spec).encode()
    message_id = PubsubBus(stack.options.project).publish("submit", data)
    return job_id_for(parse_spec(data), message_id)


def once(
    action: Callable[[JobDoc], object], when: Callable[[JobDoc], bool]
) -> Callable[[JobDoc], None]:
    """Call ``action`` the first time a polled job satisfies ``when``."""
    done: list[str] = []

    def check(job: JobDoc) -> None:
        if not done and job.instance and when(job):
            done.append(job.instance)
            action(job)

    return check


def preempt_once(
    stack: LocalStack, *, node: int = 0, attempt: int = 1, epoch: int = 1
) -> Callable[[JobDoc], None]:
    """`spotline preempt JOB --node N` (a 10 s notice), as a user runs it,
    the first time a polled job is on ``attempt`` with ``epoch`` reported."""
    chaos = ["--workdir", str(stack.workdir), "preempt", "--node", str(node), "--notice-s", "10"]
    return once(
        lambda job: cli([*chaos, job.job_id]),
        when=lambda job: job.attempt == attempt and job.epoch >= epoch,
    )


def epochs_of(store: FirestoreStore, job_id: str, count: int, timeout_s: float = 10) -> list[int]:
    """The job's epoch numbers once ``count`` are recorded: events of earlier
    epochs travel on their own subscription and may land after the finish."""
    deadline = time.monotonic() + timeout_s
    while True:
        epochs = [e.epoch for e in store.list_epochs(job_id)]
        if len(epochs) >= count or time.monotonic() > deadline:
            return epochs
        time.sleep(0.2)


def vms_of(stack: LocalStack, job_id: str) -> list[dict[str, Any]]:
    assert stack.cloud is not None
    return stack.cloud.list({"spotline-job": job_id})


def wait_no_vms(stack: LocalStack, job_id: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while vms_of(stack, job_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert vms_of(stack, job_id) == []


def uninterrupted_final_metrics(tmp_path: Path, epochs: int, seed: int) -> dict[str, float]:
    """The same training in one go, straight through the trainer."""
    events = tmp_path / "events.jsonl"
    env = {
        **os.environ,
        "SPOTLINE_CHECKPOINT_URL": str(tmp_path / "ckpt"),
        "SPOTLINE_EVENTS": str(events),
        "SPOTLINE_EPOCHS": str(epochs),
        "SPOTLINE_BATCH_SIZE": "32",
        "SPOTLINE_SEED": str(seed),
        "SPOTLINE_HYPERPARAMETERS": json.dumps(HYPER),
    }
    subprocess.run(
        [sys.executable, "-m", "spotline.vm_image.trainers.digits_mlp"],
        env=env,
        check=True,
        capture_output=True,
    )
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    return [line for line in lines if line["type"] == "epoch"][-1]["metrics"]


def stored(uri: str) -> bool:
    """Whether ``uri`` is an object in the stack's storage, asked through gcsfs."""
    fs, path = url_to_fs(uri)
    fs.invalidate_cache()  # another process wrote it: no cached listing
    return bool(fs.exists(path))


def test_a_preemption_mid_epoch_loses_nothing(local_stack: LocalStack, tmp_path: Path) -> None:
    assert local_stack.cloud is not None
    host = local_stack.cloud
    project = local_stack.options.project
    job_id = submit(local_stack)
    chaos = ChaosClient(host.endpoint, project)  # as `spotline preempt` does
    preempt = once(
        lambda job: chaos.preempt(job.zone or "", job.instance or "", 10.0),
        when=lambda job: job.attempt == 1 and job.epoch >= 1 and bool(job.zone),
    )
    # The notice's checkpoint, looked up in the bucket while the second attempt
    # starts (later epochs' checkpoints replace it: two are kept).
    notice_checkpoint: dict[str, bool] = {}

    def watch(job: JobDoc) -> None:
        preempt(job)
        if job.attempt == 2 and job.checkpoint_uri and not notice_checkpoint:
            notice_checkpoint[job.checkpoint_uri] = stored(job.checkpoint_uri)

    store = FirestoreStore(project)

    job = wait_for_job(store, job_id, 180, echo=False, on_update=watch)

    assert job.status == JobStatus.COMPLETED, job.error
    assert (job.attempt, job.preemptions) == (2, 1)
    first, second = job.attempts
    assert first.outcome == "preempted" and first.checkpoint_step is not None
    assert first.checkpoint_step > 45  # saved on the notice, after epoch 1's checkpoint
    steps_recomputed = first.checkpoint_step - (second.resumed_from_step or 0)
    assert steps_recomputed == 0  # resumed from the very step saved on the notice
    # That checkpoint went to the stack's gs:// bucket, through gcsfs.
    checkpoints = f"gs://{BUCKET}/jobs/{job_id}/checkpoints"
    assert notice_checkpoint == {f"{checkpoints}/ckpt-{first.checkpoint_step:012d}.pt": True}
    assert job.checkpoint_uri and job.checkpoint_uri.startswith(f"{checkpoints}/ckpt-")
    assert stored(job.checkpoint_uri)
    expected = uninterrupted_final_metrics(tmp_path, epochs=4, seed=3)
    assert job.metrics == pytest.approx(expected, abs=1e-6)
    assert epochs_of(store, job_id, 4) == [1, 2, 3, 4]
    wait_no_vms(local_stack, job_id)

    # The functions drove the VMs through GceCompute on Compute Engine's REST
    # routes; the preemption came over the local cloud's chaos route.
    compute = f"/compute/v1/projects/{project}"
    inserted = [r for r in host.requests_to("POST", "/instances") if r.body]
    assert {first.instance, second.instance} <= {r.body.get("name") for r in inserted}
    assert all(r.path == f"{compute}/zones/{first.zone}/instances" for r in inserted[:1])
    assert all("requestId" in r.query for r in inserted)
    listed = [r.query.get("filter", "") for r in host.requests_to("GET", "/aggregated/instances")]
    assert any(f'(labels.spotline-job = "{job_id}")' in f for f in listed)
    [preempted] = host.requests_to("POST", f"/instances/{first.instance}/preempt")
    assert preempted.path.startswith(f"/local/v1/projects/{project}/zones/{first.zone}/")
    deleted = host.requests_to("DELETE", f"/instances/{second.instance}")
    assert [r.path for r in deleted][:1] == [
        f"{compute}/zones/{second.zone}/instances/{second.instance}"
    ]


def test_a_vm_killed_without_notice_is_requeued_by_the_reaper(local_stack: LocalStack) -> None:
    assert local_stack.cloud is not None
    host = local_stack.cloud
    job_id = submit(local_stack, epochs=3)
    kill = once(
        lambda job: host.kill(job.instance or ""),
        when=lambda job: job.attempt == 1 and job.epoch >= 1,
    )
    store = FirestoreStore(local_stack.options.project)

    job = wait_for_job(store, job_id, 180, echo=False, on_update=kill)

    assert job.status == JobStatus.COMPLETED, job.error
    assert job.attempt == 2
    lost = next(h for h in job.history if h.substatus == "PREEMPTED")
    assert "missed preemption" in lost.note
    # Detected by a sweep, not by an event: within about a tick of the kill.
    placed = next(h for h in job.history if h.attempt == 2 and h.substatus == "CONNECTING_SERVER")
    assert (placed.at - lost.at).total_seconds() < 15  # one sweep (1 s tick), with room
    wait_no_vms(local_stack, job_id)


def test_a_hung_vm_is_replaced_and_the_job_fails_after_max_attempts(
    local_stack: LocalStack,
) -> None:
    assert local_stack.cloud is not None
    host = local_stack.cloud
    frozen: set[str] = set()

    def hang(job: JobDoc) -> None:
        if job.instance and job.instance not in frozen and job.substatus == "TRAINING":
            frozen.add(job.instance)
            host.freeze(job.instance)

    job_id = submit(local_stack, epochs=50, max_attempts=2)
    store = FirestoreStore(local_stack.options.project)

    job = wait_for_job(store, job_id, 180, echo=False, on_update=hang)

    assert job.status == JobStatus.FAILED
    assert job.error is not None and "gave up after 2 attempt(s)" in job.error
    assert "no heartbeat" in job.error
    assert [a.outcome for a in job.attempts] == ["stalled", "stalled"]
    wait_no_vms(local_stack, job_id)


def test_an_orphan_vm_is_deleted_within_a_sweep(local_stack: LocalStack) -> None:
    assert local_stack.cloud is not None
    host = local_stack.cloud
    labels = {"spotline": "true", "spotline-job": "ghost", "spotline-attempt": "1"}
    host.insert(
        {
            "name": "sl-ghost-a1",
            "zone": "us-central1-a",
            "machine_type": "e2-standard-4",
            "labels": labels,
        }
    )
    started = time.monotonic()
    while host.get("sl-ghost-a1") is not None and time.monotonic() - started < 10:
        time.sleep(0.1)
    assert host.get("sl-ghost-a1") is None
    assert time.monotonic() - started < 2 * local_stack.options.tick_s + 10


def test_a_preempted_vm_deprovisions_while_the_reaper_sweeps(local_stack: LocalStack) -> None:
    """Compute Engine's teardown of a preempted Spot VM (TERMINATED, then
    DEPROVISIONING, then gone) read by the reaper, sweeping every second, and
    by placement, with no crash: the job recovers on a second attempt."""
    assert local_stack.cloud is not None and local_stack.options.tick_s <= 1.0
    host = local_stack.cloud
    logs = sorted((local_stack.workdir / "logs").glob("reaper*.log"))
    assert logs  # reaper.log, reaper_page.log
    sizes = {log: log.stat().st_size for log in logs}
    job_id = submit(local_stack, epochs=3)
    chaos = ChaosClient(host.endpoint, local_stack.options.project)
    seen: list[str] = []  # the preempted VM's states, as they change
    doomed: list[str] = []

    def watch(job: JobDoc) -> None:
        if job.attempt == 1 and job.epoch >= 1 and job.zone and job.instance and not doomed:
            doomed.append(job.instance)
            chaos.preempt(job.zone, job.instance, 1.0)
            seen.append("RUNNING")
        for vm in vms_of(local_stack, job_id):
            if doomed and vm["name"] == doomed[0] and vm["state"] != seen[-1]:
                seen.append(vm["state"])

    job = wait_for_job(FirestoreStore(local_stack.options.project), job_id, 180, False, watch)

    assert job.status == JobStatus.COMPLETED, job.error
    assert (job.attempt, job.preemptions) == (2, 1)
    assert "DEPROVISIONING" in seen, seen
    assert seen.index("TERMINATED") < seen.index("DEPROVISIONING"), seen
    for log in logs:
        with log.open("rb") as read:
            read.seek(sizes[log])
            written = read.read().decode(errors="replace")
        assert "Traceback" not in written, written[-3000:]
