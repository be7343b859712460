"""A job's local state folder is used as it is, with no storage behind it (Cloud
Storage: tests/emulators/test_gcs_storage.py)."""

from __future__ import annotations

from pathlib import Path

from spotline.vm_image.trainers.state_mirror import MirroredFolder


def test_a_local_state_folder_is_used_as_it_is(tmp_path: Path) -> None:
    folder = MirroredFolder((tmp_path / "ckpt").as_uri())
    assert not folder.remote and folder.local == tmp_path / "ckpt"
    assert folder.push(["state.h5"]) == [] and folder.pull(["state.h5"]) == []
    assert MirroredFolder(str(tmp_path)).local == tmp_path
