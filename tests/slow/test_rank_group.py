"""A node's ranks as one trainer (spotline.vm_image.agent.rank_group), with real processes."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from spotline.vm_image.agent.rank_group import RankGroup, rank_events_path
from spotline.vm_image.agent.trainer_process import TrainerProcess

pytestmark = pytest.mark.slow

# A rank that saves for 1.5 s on SIGTERM, then exits 143; or ignores it.
SAVES_ON_SIGTERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.5), sys.exit(143)))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
DEAF = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('blocked in a collective', flush=True)\n"
    "time.sleep(60)\n"
)


def ranks(tmp_path: Path, *scripts: str) -> list[TrainerProcess]:
    started = []
    for local_rank, script in enumerate(scripts):
        events = rank_events_path(tmp_path / "events.jsonl", local_rank)
        started.append(
            TrainerProcess(
                [sys.executable, "-c", script],
                dict(os.environ),
                tmp_path,
                events,
                lambda record: None,
                log_name=f"rank{local_rank}.log",
            )
        )
    return started


def test_the_first_rank_to_fail_ends_the_node_with_its_code(tmp_path: Path) -> None:
    group = RankGroup(
        ranks(tmp_path, DEAF, "import sys, time; time.sleep(0.5); print('boom'); sys.exit(3)"),
        stop_grace_s=1.0,
    )
    started = time.monotonic()

    assert group.wait() == 3

    assert time.monotonic() - started < 15  # not the deaf rank's 60 s
    assert group.ranks[0].process.returncode == -signal.SIGKILL  # after the grace
    assert group.log_tail() == "[local rank 1 of 2 exited with code 3 first]\nboom\n"


def test_after_the_notice_every_rank_saves_in_its_own_time(tmp_path: Path) -> None:
    quick = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
    group = RankGroup(
        ranks(tmp_path, SAVES_ON_SIGTERM, quick + "time.sleep(60)\n"), stop_grace_s=0.3
    )
    time.sleep(1.0)  # both have their handlers
    group.signal(signal.SIGTERM)

    assert group.wait() == 143
    # Rank 1's exit killed nobody: rank 0 took its 1.5 s to save, past the grace.
    assert [rank.process.returncode for rank in group.ranks] == [143, 143]


def test_ranks_that_all_succeed_answer_with_rank_0s_lines(tmp_path: Path) -> None:
    group = RankGroup(ranks(tmp_path, "print('rank 0 done')", "print('rank 1 done')"))
    assert group.wait() == 0
    assert group.log_tail() == "rank 0 done\n"
    assert (tmp_path / "rank1.log").read_text() == "rank 1 done\n"
    assert rank_events_path(tmp_path / "events.jsonl", 1).name == "events-rank1.jsonl"


def test_a_rank_stopped_with_its_gang_kills_no_peer_still_saving(tmp_path: Path) -> None:
    """Another node got the notice, none came here: the ranks agreed to stop,
    local rank 1 exits 143 at once while rank 0 still writes the gang's
    checkpoint (SIGTERM ignored: it is stopping already). 143 is "stopped to
    save", not a failure that must end the others: rank 0 is not killed."""
    saving = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "time.sleep(1.5)\n"
        "sys.exit(143)\n"
    )
    group = RankGroup(ranks(tmp_path, saving, "import sys; sys.exit(143)"), stop_grace_s=0.3)

    assert group.wait() == 143
    assert [rank.process.returncode for rank in group.ranks] == [143, 143]
