"""A job that never saved says so (``spotline.shared.domain.nothing_saved``):
the agent's counts of what its mirror stored, judged on the job, shown by
``watch`` and the dashboard."""

from __future__ import annotations

import io
import threading
import time
from datetime import UTC, datetime
from typing import Any

from spotline.infra.cli.watch import follow
from spotline.infra.dashboard.views import job_row
from spotline.shared.adapters.firestore_listen import JobFeed
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.contract.events import JobFinished, SpotPreempted, parse_preemption
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.nothing_saved import after_preemption
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobSubstatus as S
from spotline.shared.domain.transitions import move_job
from tests.documents import T0

SPEC = {"user": "alice", "machine_ids": ["g2-standard-4"], "command": ["python", "t.py"]}
COMMON = {"job_id": "n1", "attempt": 1, "instance": "sl-n1-a1", "sent_at": T0.isoformat()}


def a_job() -> JobDoc:
    return new_job(JobSpec.model_validate(SPEC), "n1", "m1", T0)


def training(job: JobDoc, now: datetime = T0) -> JobDoc:
    for to in (S.CONNECTING_SERVER, S.GEARING_UP_ENV, S.TRAINING):
        job = move_job(job, to, now)
    return job


def completed() -> JobDoc:
    return move_job(training(a_job()), S.COMPLETED, T0)


def notice(**fields: Any) -> Any:
    return parse_preemption(
        SpotPreempted.model_validate({**COMMON, **fields}).model_dump_json().encode()
    )


def finished(**fields: Any) -> JobFinished:
    return JobFinished.model_validate({**COMMON, "exit_code": 0, **fields})


def test_watch_and_the_dashboard_show_the_line(project: str) -> None:
    store = FirestoreStore(project)
    job = training(a_job(), datetime.now(UTC))
    store.create_job(job)
    line = after_preemption(job, notice(mirrored_checkpoints=0)).nothing_saved

    def play() -> None:
        time.sleep(0.5)
        store.update_job(job.job_id, lambda j: j.model_copy(update={"nothing_saved": line}))
        time.sleep(0.3)
        store.update_job(job.job_id, lambda j: move_job(j, S.COMPLETED, datetime.now(UTC)))

    out = io.StringIO()
    player = threading.Thread(target=play)
    player.start()
    with JobFeed(store, [job.job_id]) as feed:
        follow(feed, [job.job_id], out=out, live=False)
    player.join(timeout=30)

    shown = [row.split("  ", 2)[2] for row in out.getvalue().splitlines()]
    assert f"nothing saved: {line}" in shown
    stored = store.get_job(job.job_id)
    assert stored is not None and job_row(stored, datetime.now(UTC)).nothing_saved == line
