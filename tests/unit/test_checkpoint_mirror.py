"""The agent's mirror of a trainer's local folder (tests/checkpoint_mirror.py)
on a ``file://`` folder, and what the trainer's account may not read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spotline.vm_image.agent.checkpoint_mirror import FolderMirror
from spotline.vm_image.agent.privileges import TrainerAccount
from tests.checkpoint_mirror import *  # noqa: F403  (the mirror's tests, collected here)
from tests.checkpoint_mirror import stored, write


@pytest.fixture
def url(tmp_path: Path) -> str:
    return (tmp_path / "bucket").as_uri()


def test_a_file_the_trainer_could_not_read_is_not_uploaded(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the agent's account on a VM")
    url = (tmp_path / "bucket").as_uri()
    secret = tmp_path / "root-only"
    write(secret / "shadow", b"root's secret")
    (secret / "shadow").chmod(0o600)
    local = tmp_path / "ckpt"
    write(local / "mine.pt", b"the trainer's")
    os.chown(local / "mine.pt", 65534, 65534)
    (local / "mine.pt").chmod(0o600)
    os.link(secret / "shadow", local / "hardlinked.pt")  # a link no lstat can tell
    trainer = TrainerAccount("nobody", 65534, 65534, [65534], dedicated=True)

    done = FolderMirror(local, url, reader=trainer).sync(final=True)

    assert done.stored == ["mine.pt"]
    assert stored(url, "hardlinked.pt") is None
