"""``spotline demo``: the local stack, one job from publish to COMPLETED, stop."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from spotline.infra.cli.exit_codes import Exit
from spotline.infra.cli.report import job_detail
from spotline.infra.localcloud.chaos_client import ChaosClient
from spotline.infra.localstack.stack import LocalStack, StackOptions
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.adapters.pubsub_bus import PubsubBus
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import job_id_for
from spotline.shared.domain.spec import parse_spec
from spotline.shared.domain.states import JobStatus
from spotline.shared.settings import Settings

# The job the demo runs unless given one: examples/digits.json, shipped in the
# package (a link to it in a clone) so that `spotline demo` runs in any folder.
DEMO_SPEC = "digits.json"


def wait_for_job(
    store: FirestoreStore,
    job_id: str,
    timeout_s: float,
    echo: bool = True,
    on_update: Callable[[JobDoc], None] | None = None,
) -> JobDoc:
    """Poll the job until it ends, printing each new history line."""
    deadline = time.monotonic() + timeout_s
    shown = 0
    job = None
    while time.monotonic() < deadline:
        job = store.get_job(job_id)
        if job is not None:
            for entry in job.history[shown:]:
                if echo:
                    print(
                        f"  {entry.at:%H:%M:%S.%f}"[:-3]
                        + f"  {entry.status}/{entry.substatus}"
                        + (f"  ({entry.note})" if entry.note else ""),
                        flush=True,
                    )
            shown = len(job.history)
            if job.status in JobStatus.terminal():
                return job
            if on_update is not None:
                on_update(job)
        time.sleep(0.2)
    raise TimeoutError(
        f"job {job_id} did not end within {timeout_s} s (last: "
        f"{job.status if job else 'not created'})"
    )


def run_demo(
    workdir: Path,
    spec_path: Path | None,
    timeout_s: float,
    preempt_after_epoch: int = 2,
    notice_s: float = 10.0,
) -> int:
    """Run one job on a fresh local stack; preempt its first VM after
    ``preempt_after_epoch`` epochs (0: never) to show the recovery; with no
    ``spec_path``, the digits job."""
    started = time.monotonic()
    options = StackOptions(tick_s=5.0, heartbeat_s=2.0)
    with LocalStack(workdir, options) as stack:
        print(
            f"local stack ready in {stack.timings['ready_s']:.1f} s "
            f"(emulators {stack.timings['emulators_s']:.1f} s); logs in {workdir}/logs"
        )
        shipped = resources.files("spotline.infra.cli").joinpath(DEMO_SPEC)
        data = (spec_path or shipped).read_bytes()
        spec = parse_spec(data)
        message_id = PubsubBus(options.project).publish("submit", data)
        job_id = job_id_for(spec, message_id)
        print(f"submitted {spec_path or 'the digits job'} as job {job_id}")
        store = FirestoreStore(options.project)
        preempted: list[str] = []

        def chaos(job: JobDoc) -> None:
            if (
                preempt_after_epoch
                and not preempted
                and job.attempt == 1
                and job.epoch >= preempt_after_epoch
                and job.instance
                and job.zone
            ):
                assert stack.cloud is not None
                print(
                    f"  -- preempting {job.instance} after epoch {job.epoch} "
                    f"({notice_s:g} s notice) --",
                    flush=True,
                )
                chaos = ChaosClient(stack.cloud.endpoint, options.project)
                chaos.preempt(job.zone, job.instance, notice_s)
                preempted.append(job.instance)

        job = wait_for_job(store, job_id, timeout_s, on_update=chaos)
        print()
        print(job_detail(job, store.list_epochs(job_id)))
        print(stored_files(Settings.from_env(config_file=False).job_prefix(job_id)))
        vms_left = _wait_vms_gone(stack, timeout_s=30)
        print(f"\nVM processes left: {vms_left}")
    print(f"demo finished in {time.monotonic() - started:.1f} s: {job.status}")
    return Exit.OK if job.status == JobStatus.COMPLETED and vms_left == 0 else Exit.FAILED


def stored_files(prefix: str) -> str:
    """What a job left in storage (the emulator's bucket here), listed through gcsfs."""
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(prefix)
    fs.invalidate_cache()  # the VMs wrote it, not this process
    found = fs.find(root, detail=True)
    lines = [f"stored under {prefix}:"]
    for path, info in sorted(found.items()):
        lines.append(f"  {path.removeprefix(root).lstrip('/')}  {info['size']:,} bytes")
    return "\n".join(lines) if found else f"nothing stored under {prefix}"


def _wait_vms_gone(stack: LocalStack, timeout_s: float) -> int:
    assert stack.cloud is not None
    deadline = time.monotonic() + timeout_s
    while True:
        running = sum(1 for vm in stack.cloud.list() if vm["state"] == "RUNNING")
        if running == 0 or time.monotonic() > deadline:
            return running
        time.sleep(0.2)
