"""The agent's mirror of a trainer's local folder when the VM dies halfway
through an upload: a real process, killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spotline.vm_image.agent.checkpoint_mirror import FolderMirror
from tests.checkpoint_mirror import write


@pytest.mark.slow
def test_a_unit_half_uploaded_when_the_vm_dies_is_not_restored(tmp_path: Path) -> None:
    url = (tmp_path / "bucket").as_uri()
    local = tmp_path / "vm1"
    now = time.time()
    write(local / "save-1" / "model.bin", b"complete", mtime_s=now - 60)
    FolderMirror(local, url).sync(final=True)
    for part in range(40):  # big enough to kill the upload halfway
        write(local / "save-2" / f"shard-{part:02d}.bin", os.urandom(4 << 20))
    # The VM dies while the agent uploads save-2: the process is killed.
    agent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from spotline.vm_image.agent.checkpoint_mirror import FolderMirror; "
            "FolderMirror(Path(sys.argv[1]), sys.argv[2]).sync(final=True)",
            str(local),
            url,
        ]
    )
    bucket = tmp_path / "bucket" / "save-2"
    deadline = time.monotonic() + 60
    while not (bucket.exists() and len(list(bucket.iterdir())) >= 3):
        assert agent.poll() is None and time.monotonic() < deadline, "the upload ended first"
        time.sleep(0.01)
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    assert len(list(bucket.iterdir())) < 40

    restored = tmp_path / "vm2"
    assert FolderMirror(restored, url).restore() == 1

    assert sorted(p.name for p in restored.iterdir()) == ["save-1"]
    assert (restored / "save-1" / "model.bin").read_bytes() == b"complete"
