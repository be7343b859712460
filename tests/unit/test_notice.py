"""The SIGTERM flag the framework integrations share, and the storage URL of a
path in a mirrored folder."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from spotline.notice import EXIT_STOPPED, NoticeFlag, stored_uri
from spotline.shared.contract.ranks import EXIT_STOPPED as AGENTS_EXIT_STOPPED


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def deliver_sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)  # Python runs the handler between bytecodes of this thread


def test_sigterm_sets_the_flag_and_the_process_lives_on(sigterm_restored: None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # what would end the process
    flag = NoticeFlag().install()

    deliver_sigterm()

    assert flag.requested


def test_an_earlier_handler_still_sees_the_signal(sigterm_restored: None) -> None:
    seen: list[int] = []

    def earlier(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    signal.signal(signal.SIGTERM, earlier)
    with NoticeFlag() as flag:
        deliver_sigterm()
        assert flag.requested and seen == [signal.SIGTERM]

    assert signal.getsignal(signal.SIGTERM) is earlier  # put back on leaving


def test_the_exit_code_is_the_one_the_agent_reads_as_stopped() -> None:
    assert EXIT_STOPPED == AGENTS_EXIT_STOPPED == 143


def test_a_path_in_a_mirrored_folder_is_named_by_its_storage_url(tmp_path: Path) -> None:
    env = {
        "SPOTLINE_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "SPOTLINE_CHECKPOINT_URL": "gs://bucket/jobs/j1/checkpoints/",
        "SPOTLINE_OUTPUT_DIR": str(tmp_path / "out"),
        "SPOTLINE_OUTPUT_URL": "gs://bucket/jobs/j1/outputs",
    }

    assert (
        stored_uri(tmp_path / "ckpt" / "checkpoint-33", env)
        == "gs://bucket/jobs/j1/checkpoints/checkpoint-33"
    )
    assert stored_uri(tmp_path / "ckpt", env) == "gs://bucket/jobs/j1/checkpoints"
    assert stored_uri(tmp_path / "out" / "model.pt", env) == "gs://bucket/jobs/j1/outputs/model.pt"
    # Outside the mirrored folders, or with no URL (outside spotline): as given.
    assert stored_uri(tmp_path / "ckpt-2" / "x", env) == str(tmp_path / "ckpt-2" / "x")
    assert stored_uri(tmp_path / "ckpt" / "x", {}) == str(tmp_path / "ckpt" / "x")


def test_the_pytorch_flag_also_passes_the_signal_on(sigterm_restored: None) -> None:
    from spotline.torch import PreemptionFlag

    seen: list[int] = []

    def earlier(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    signal.signal(signal.SIGTERM, earlier)
    with PreemptionFlag() as flag:
        deliver_sigterm()
        assert flag.exit_requested and seen == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is earlier
