"""``spotline watch`` follows jobs through Firestore listeners
(the emulator pushes each change), a line per change to a pipe or a redrawn
table with progress bars on a terminal, and ends with the job's outcome."""

from __future__ import annotations

import functools
import io
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.cli.exit_codes import Exit
from spotline.infra.cli.watch import follow
from spotline.shared.adapters.firestore_listen import JobFeed
from spotline.shared.adapters.firestore_store import FirestoreStore
from spotline.shared.domain.documents import EpochDoc, JobDoc
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import JobSubstatus as S
from spotline.shared.domain.transitions import fail_job, move_job
from tests.documents import at

SPEC = {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp", "epochs": 3}


def epoch(n: int, seconds: float, attempt: int = 1) -> EpochDoc:
    return EpochDoc(
        epoch=n, epochs=3, attempt=attempt, step=10 * n, metrics={"loss": 1.0 / n},
        instance="sl-w1-a1", at=at(seconds),
    )  # fmt: skip


def moved(job: JobDoc, to: S) -> JobDoc:
    return move_job(job, to, datetime.now(UTC))


def at_epoch(job: JobDoc, n: int) -> JobDoc:
    return job.model_copy(update={"epoch": n})


def play(store: FirestoreStore, job_id: str, ending: S) -> None:
    """The job's life as the handlers write it, a little apart."""
    now = datetime.now(UTC)
    time.sleep(0.5)  # the listeners' first snapshots first
    for to in (S.CONNECTING_SERVER, S.GEARING_UP_ENV, S.TRAINING):
        store.update_job(job_id, functools.partial(moved, to=to))
        time.sleep(0.1)
    for n in (1, 2):
        store.put_epoch(job_id, epoch(n, 0).model_copy(update={"at": now + timedelta(seconds=n)}))
        store.update_job(job_id, functools.partial(at_epoch, n=n))
        time.sleep(0.1)
    if ending == S.COMPLETED:
        store.update_job(job_id, lambda j: move_job(j, S.COMPLETED, datetime.now(UTC)))
    else:
        store.update_job(job_id, lambda j: fail_job(j, ending, datetime.now(UTC), "it broke"))


def watch_while(store: FirestoreStore, job: JobDoc, ending: S, live: bool) -> tuple[int, str]:
    store.create_job(job)
    out = io.StringIO()
    player = threading.Thread(target=play, args=(store, job.job_id, ending))
    player.start()
    with JobFeed(store, [job.job_id]) as feed:
        code = follow(feed, [job.job_id], out=out, live=live)
    player.join(timeout=30)
    return code, out.getvalue()


@pytest.mark.parametrize(
    ("ending", "code"), [(S.COMPLETED, 0), (S.FAILED, Exit.FAILED), (S.CANCELED, Exit.CANCELED)]
)
def test_watch_prints_each_change_and_ends_with_the_outcome(
    project: str, ending: S, code: int
) -> None:
    store = FirestoreStore(project)
    job = new_job(JobSpec.model_validate(SPEC), "w1", "m1", datetime.now(UTC))

    returned, text = watch_while(store, job, ending, live=False)

    assert returned == code
    moves = [line.split("  ")[2] for line in text.splitlines() if "/" in line.split("  ")[2]]
    assert moves[:4] == [
        "QUEUING/REQUESTING_SERVER",
        "QUEUING/CONNECTING_SERVER",
        "QUEUING/GEARING_UP_ENV",
        "TRAINING/TRAINING",
    ]
    assert moves[-1].startswith(f"{ending}/{ending}")
    epochs = [line for line in text.splitlines() if "  epoch " in line]
    assert [line.split("  ")[2] for line in epochs] == ["epoch 1/3", "epoch 2/3"]
    assert "loss=0.5" in epochs[1]


def test_on_a_terminal_watch_draws_a_progress_bar_per_job(project: str) -> None:
    store = FirestoreStore(project)
    job = new_job(JobSpec.model_validate(SPEC), "w2", "m1", datetime.now(UTC))

    returned, text = watch_while(store, job, S.COMPLETED, live=True)

    assert returned == 0
    last = text.rsplit("JOB", 1)[-1]  # the last table drawn
    assert "w2" in last and "COMPLETED/COMPLETED" in last and "2/3" in last
    assert "━" in last  # rich's bar


def test_watch_of_an_unknown_job_fails(project: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["watch", "nope"]) == 1
    assert "no job nope" in capsys.readouterr().err
