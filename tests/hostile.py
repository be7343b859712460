"""A world for hostile messages: a job in TRAINING on its VM, reached through the
real functions framework, on the in-memory store or on the Firestore emulator;
and what is needed to tell that a message changed nothing in it."""

from __future__ import annotations

import base64
import json
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import functions_framework
import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.contract.events import (
    EpochDone,
    Heartbeat,
    JobFinished,
    SpotPreempted,
    VmBooted,
)
from spotline.shared.domain.vms import EVENT_TOKEN_METADATA_KEY
from spotline.shared.ports.store import Store
from spotline.shared.settings import TOPICS

ROOT = Path(__file__).resolve().parent.parent
SPEC: dict[str, Any] = {
    "user": "alice",
    "machine_ids": ["g2-standard-4"],
    "trainer": "digits_mlp",
    "epochs": 3,
    "job_id": "job1",
}
# Each handler, the topic it listens on, and a valid message for the world.
TOPIC = {
    "submit_job": "submit",
    "cancel_job": "cancel",
    "on_vm_booted": "vm_booted",
    "on_epoch_done": "epoch_done",
    "on_job_finished": "job_finished",
    "on_spot_preempted": "spot_preempted",
    "reaper": "reaper_tick",
}


def vm_fields(**fields: Any) -> dict[str, Any]:
    base = {"job_id": "job1", "attempt": 1, "instance": "sl-job1-a1"}
    return {"sent_at": datetime.now(UTC).isoformat(), **base, **fields}


def valid(kind: str, token: str = "") -> dict[str, Any]:
    """A valid message of ``kind`` for the world's job (a handler name, or
    ``heartbeat`` / ``epoch`` for the two shapes on spotline-epoch-done); a VM
    event carries ``token`` when given (``World.token``)."""
    message = {
        "submit_job": {**SPEC, "job_id": "job2"},
        "cancel_job": {"job_id": "job1"},
        "on_vm_booted": vm_fields(zone="us-central1-a", instance_id="123"),
        "heartbeat": vm_fields(kind="heartbeat", phase="TRAINING", step=5),
        "epoch": vm_fields(kind="epoch", epoch=1, epochs=3, step=45, metrics={"loss": 0.5}),
        "on_job_finished": vm_fields(exit_code=0, log_tail="done\n"),
        "on_spot_preempted": vm_fields(step=10, checkpoint_uri="file:///ckpt"),
        "reaper": {},
    }[kind]
    return {**message, "token": token} if token and kind in MODELS else message


MODELS = {
    "on_vm_booted": VmBooted,
    "heartbeat": Heartbeat,
    "epoch": EpochDone,
    "on_job_finished": JobFinished,
    "on_spot_preempted": SpotPreempted,
}


# The handlers of VM events: what they are sent carries the VM's event token.
VM_TARGETS = {"on_vm_booted", "on_epoch_done", "on_job_finished", "on_spot_preempted"}


@dataclass
class World:
    """The handlers of one project, its store, and the local cloud its VM is in."""

    store: Store
    project: str
    cloud: LocalCloud
    clients: dict[str, Any] = field(default_factory=dict)
    token: str = ""  # job1's VM's event token, read from its metadata by set_up

    def post(self, target: str, message: dict[str, Any]) -> Any:
        """POST a Pub/Sub push envelope holding ``message`` (its data as given)."""
        if target not in self.clients:
            app = functions_framework.create_app(
                target=target,
                source=str(ROOT / "functions" / "main.py"),
                signature_type="cloudevent",
            )
            self.clients[target] = app.test_client()
        topic = f"projects/{self.project}/topics/{TOPICS[TOPIC[target]]}"
        body = {"message": message, "subscription": f"projects/{self.project}/subscriptions/s"}
        return self.clients[target].post(f"/{topic}", json=body)

    def send(self, target: str, payload: bytes | dict[str, Any], message_id: str = "1") -> Any:
        """``payload`` to ``target``; to a VM event's handler, as job1's VM
        sends it: with its event token (a ``token`` of the payload's own wins)."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        if target in VM_TARGETS and self.token and data.startswith(b"{"):
            data = b'{"token": "' + self.token.encode() + b'", ' + data[1:]
            data = data.replace(b", }", b"}", 1) if data.endswith(b", }") else data
        return self.post(target, envelope(data, message_id))

    def set_up(self) -> None:
        """job1, submitted, its VM booted and training."""
        assert self.send("submit_job", SPEC, message_id="setup-submit_job").status_code == 200
        vm = self.cloud.get("sl-job1-a1")
        assert vm is not None
        self.token = vm["metadata"][EVENT_TOKEN_METADATA_KEY]  # as its agent reads it
        for target, payload in (
            ("on_vm_booted", valid("on_vm_booted")),
            ("on_epoch_done", valid("heartbeat")),
        ):
            assert self.send(target, payload, message_id=f"setup-{target}").status_code == 200
        job = self.store.get_job("job1")
        assert job is not None and job.substatus == "TRAINING"


def envelope(payload: bytes, message_id: str = "1", **fields: Any) -> dict[str, Any]:
    published = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    message = {
        "data": base64.b64encode(payload).decode(),
        "messageId": message_id,
        "publishTime": published,
        "attributes": {},
    }
    return {**message, **fields}


def snapshot(store: Store) -> dict[str, Any]:
    """Every document the store holds, through the port alone."""
    jobs = store.list_jobs(limit=10_000)
    return {
        "jobs": [j.model_dump() for j in jobs],
        "epochs": {j.job_id: [e.model_dump() for e in store.list_epochs(j.job_id)] for j in jobs},
        "instances": [i.model_dump() for i in store.list_instances(limit=10_000)],
        "queue": [q.model_dump() for q in store.due_queue(datetime(2200, 1, 1, tzinfo=UTC))],
        "users": [u.model_dump() for u in store.list_users()],
        "rejected": [r.model_dump() for r in store.recent_rejections(limit=10_000)],
    }


def log_records(text: str) -> list[dict[str, Any]]:
    """The structured log lines (``spotline.shared.logs``) in captured output."""
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def memory_world(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Generator[World]:
    """The world on the in-memory store, its VMs in the local cloud (records)."""
    from spotline.infra.localcloud.launchers import RecordLauncher
    from spotline.shared.adapters.memory_store import InMemoryStore
    from spotline.shared.adapters.recording_bus import RecordingBus
    from spotline.shared.settings import Settings

    with LocalCloud("hostile", RecordLauncher()) as cloud:
        settings = Settings(
            project="hostile",
            zones=("us-central1-a", "us-central1-b"),
            compute_endpoint=cloud.endpoint,
            storage_root=f"file://{tmp_path}/storage",
        )
        store = InMemoryStore()
        process = deps.Deps(settings, store=store, bus=RecordingBus("hostile"))
        monkeypatch.setattr(deps, "_current", process)
        yield World(store=store, project="hostile", cloud=cloud)
