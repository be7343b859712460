"""What the scale benchmarks share: a Firestore emulator of their own, one job
made by the real operations (a template, cloned by the thousand), batch
seeding, and the results file.

A template job, not hand-made documents: its history, attempt record, prices
and labels are what placement writes, so the documents the reaper reads at
10,000 jobs are the size and shape of real ones.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(REPO))

from spotline.functions.deps import Deps  # noqa: E402
from spotline.functions.ops.jobs import admit, start  # noqa: E402
from spotline.infra.localcloud.cloud import LocalCloud  # noqa: E402
from spotline.infra.localcloud.launchers import RecordLauncher  # noqa: E402
from spotline.infra.localstack.emulators import start_firestore  # noqa: E402
from spotline.shared.adapters.gce_compute import GceCompute  # noqa: E402
from spotline.shared.adapters.memory_store import InMemoryStore  # noqa: E402
from spotline.shared.domain.documents import InstanceDoc, JobDoc, to_firestore  # noqa: E402
from spotline.shared.domain.lifecycle import advance, instance_executing, instance_seen  # noqa: E402
from spotline.shared.domain.placement import vm_name  # noqa: E402
from spotline.shared.domain.spec import JobSpec  # noqa: E402
from spotline.shared.domain.states import JobSubstatus  # noqa: E402
from spotline.shared.domain.transitions import move_job  # noqa: E402
from spotline.shared.settings import Settings  # noqa: E402

ZONES = ("us-central1-a", "us-central1-b")
SPEC = {"user": "u0000", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp", "epochs": 15}


@contextmanager
def firestore_emulator() -> Iterator[str]:
    """A Firestore emulator of this run's own; FIRESTORE_EMULATOR_HOST points at it."""
    # A benchmark stopped by a signal stops its emulator too (finally runs).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory() as logs:
        emulator = start_firestore(Path(logs))
        try:
            emulator.wait_ready()
            os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.host
            yield emulator.host
        finally:
            emulator.stop()


def compute_client(cloud: LocalCloud) -> GceCompute:
    return GceCompute(cloud.project, api_endpoint=cloud.endpoint, read_retry_s=1.0)


@dataclass
class Template:
    """One TRAINING job on its executing VM, as the real operations left them."""

    job: JobDoc
    instance: InstanceDoc
    vm: dict[str, Any]  # the local cloud's insert fields for the VM


def template(now: datetime) -> Template:
    """Admit and place one job through ``spotline.functions.ops`` (in-memory store, local
    cloud), then bring it to TRAINING with a heartbeat at ``now``."""
    with LocalCloud("bench-template", RecordLauncher()) as cloud:
        store = InMemoryStore()
        settings = Settings(project=cloud.project, zones=ZONES)
        deps = Deps(settings, store=store, compute=compute_client(cloud), clock=lambda: now)
        job = start(deps, admit(deps, JobSpec.model_validate(SPEC), "m1", now), now)
        for phase in (
            JobSubstatus.GEARING_UP_ENV,
            JobSubstatus.SENDING_MODEL_AND_DATA,
            JobSubstatus.TRAINING,
        ):
            store.update_job(job.job_id, partial(advance, to=phase, now=now))
        assert job.instance is not None
        store.update_instance(
            job.instance, lambda i: instance_executing(instance_seen(i, now, booted=True), now)
        )
        trained, instance = store.get_job(job.job_id), store.get_instance(job.instance)
        [vm] = cloud.list()
        assert trained is not None and instance is not None
        return Template(trained, instance, vm)


def job_id(n: int) -> str:
    return f"bench{n:06}"


def user_of(n: int) -> str:
    """Five jobs per user: the default quota of active jobs."""
    return f"u{n // 5:05}"


def clone(t: Template, n: int) -> tuple[JobDoc, InstanceDoc, dict[str, Any]]:
    """Job ``n``: the template under its own id, user and VM name."""
    jid, user = job_id(n), user_of(n)
    name = vm_name(jid, 1)
    spec = t.job.spec.model_copy(update={"user": user, "job_id": jid})
    attempts = [a.model_copy(update={"instance": name}) for a in t.job.attempts]
    job = t.job.model_copy(
        update={"job_id": jid, "user": user, "spec": spec, "instance": name, "attempts": attempts}
    )
    instance = t.instance.model_copy(update={"name": name, "job_id": jid, "user": user})
    labels = {**t.vm["labels"], "spotline-job": jid}
    return job, instance, {"name": name, "zone": t.vm["zone"], "labels": labels}


def completed(t: Template, first: int, count: int, now: datetime) -> Iterator[tuple[str, Any]]:
    """``count`` finished jobs from number ``first`` (what a team's past jobs
    look like), as Firestore fields: one model, then copies of its fields with
    their own ids (a model each costs minutes of CPU at 100,000)."""
    job, _, _ = clone(t, 0)
    # Its events published, as a finished job's are: an outbox left pending
    # would be read by every sweep's stage 5 (200 at a time).
    done = move_job(job, JobSubstatus.COMPLETED, now).model_copy(update={"pending_events": []})
    fields = to_firestore(done)
    for n in range(first, first + count):
        jid, name = job_id(n), vm_name(job_id(n), 1)
        spec = {**fields["spec"], "user": user_of(n), "job_id": jid}
        attempts = [{**a, "instance": name} for a in fields["attempts"]]
        update = {"job_id": jid, "user": user_of(n), "spec": spec, "instance": name}
        yield jid, {**fields, **update, "attempts": attempts}


def batch_write(client: Any, collection: str, docs: Iterable[tuple[str, Any]]) -> float:
    """Write ``docs`` ((key, model) pairs, made as they are written: 100,000 jobs
    do not fit in memory at once) in batches of 500, Firestore's bound; seconds."""
    started = time.perf_counter()
    batch, size = client.batch(), 0
    for key, doc in docs:
        fields = doc if isinstance(doc, dict) else to_firestore(doc)
        batch.set(client.collection(collection).document(key), fields)
        size += 1
        if size == 500:
            batch.commit()
            batch, size = client.batch(), 0
    if size:
        batch.commit()
    return time.perf_counter() - started


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    memory_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(memory_kib / 2**20, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def save(name: str, results: dict[str, Any]) -> Path:
    """Merge ``results`` under ``name`` into today's results file; its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    path = RESULTS / f"scale-{today}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update({"date": today, "machine": machine(), name: results})
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path
