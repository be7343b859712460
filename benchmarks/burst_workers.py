"""One function instance of the submit burst: a process serving the real
``submit_job`` through the functions framework's app, with threads.

Cloud Functions scales a burst out to many instances, each a process with
its own interpreter (and GIL); one process with many threads models one
instance only. The benchmark therefore starts ``processes`` of these, each
taking submissions from one shared queue with ``threads`` threads, until the
queue is empty.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import queue
import threading
import time
from collections import Counter
from multiprocessing.synchronize import Event
from typing import Any

Submission = tuple[int, dict[str, Any]]


def serve(
    env: dict[str, str],
    threads: int,
    warmup: dict[str, Any],
    ready: Any,  # multiprocessing Queue
    go: Event,
    work: Any,  # multiprocessing Queue of Submission | None
    results: Any,  # multiprocessing Queue
    release: Event,
    profile: bool,
) -> None:
    """Warm up, say ready, wait for ``go``, serve until ``work`` is empty, report."""
    os.environ.update(env)
    import functions_framework
    from scale_world import REPO

    from spotline.functions import deps as process_deps
    from spotline.functions.deps import Deps
    from spotline.shared.adapters.counting_store import CountingStore
    from spotline.shared.adapters.firestore_store import FirestoreStore
    from spotline.shared.settings import Settings
    from tests.pubsub_events import post

    settings = Settings.from_env(config_file=False)
    store = CountingStore(FirestoreStore(settings.project))
    process_deps._current = Deps(settings, store=store)
    app = functions_framework.create_app(
        target="submit_job", source=str(REPO / "functions" / "main.py"), signature_type="cloudevent"
    )
    # A cold instance's first request pays for the clients' imports and
    # channels (bench_scale_coldstart): not part of the burst.
    post(app.test_client(), settings.project, "submit", warmup, f"warmup-{os.getpid()}")
    before = store.ops.snapshot()
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    profiler = cProfile.Profile() if profile else None

    def take() -> None:
        client = app.test_client()
        if profiler is not None and threading.current_thread() is workers[0]:
            profiler.enable()
        while True:
            try:
                item: Submission | None = work.get(timeout=60)
            except queue.Empty:
                break
            if item is None:
                work.put(None)  # the next thread of any process stops too
                break
            n, spec = item
            status = post(client, settings.project, "submit", spec, f"burst-{n}").status_code
            with lock:
                statuses[status] += 1
        if profiler is not None and threading.current_thread() is workers[0]:
            profiler.disable()

    workers = [threading.Thread(target=take) for _ in range(threads)]
    ready.put(os.getpid())
    go.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    ops = store.ops - before
    report: dict[str, Any] = {
        "pid": os.getpid(),
        "seconds": time.perf_counter() - started,
        "statuses": dict(statuses),
        "reads": ops.reads,
        "writes": ops.writes,
        "deletes": ops.deletes,
        "calls": ops.calls,
        "by_method": dict(ops.by_method),
    }
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        report["profile"] = out.getvalue()
    results.put(report)
    release.wait(120)  # alive until the parent has read this process's CPU time
