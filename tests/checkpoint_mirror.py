"""The agent's mirror of a trainer's local folder, against real storage: its
tests take the ``url`` of a bucket, which tests/unit/test_checkpoint_mirror.py
gives as a ``file://`` folder and tests/emulators/test_checkpoint_mirror_gcs.py
as the Cloud Storage emulator through gcsfs; each imports them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from fsspec.core import url_to_fs

from spotline.vm_image.agent.checkpoint_mirror import MANIFEST, FolderMirror


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def listed(url: str) -> dict[str, list[str]]:
    """The units the stored manifest lists, with their files."""
    fs, root = url_to_fs(url)
    try:
        units = json.loads(fs.cat_file(f"{root}/{MANIFEST}"))["units"]
    except FileNotFoundError:
        return {}
    return {name: entry["files"] for name, entry in units.items()}


def stored(url: str, name: str) -> bytes | None:
    fs, root = url_to_fs(url)
    fs.invalidate_cache()
    try:
        return bytes(fs.cat_file(f"{root}/{name}"))
    except FileNotFoundError:
        return None


def write(path: Path, data: bytes, mtime_s: float | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime_s is not None:
        os.utime(path, (mtime_s, mtime_s))


def test_a_unit_is_stored_once_unchanged_for_the_settle_period(tmp_path: Path, url: str) -> None:
    clock = Clock()
    local = tmp_path / "ckpt"
    mirror = FolderMirror(local, url, settle_s=2.0, clock=clock)
    write(local / "save-10" / "model.bin", b"m" * 100)

    assert mirror.sync().pending == ["save-10"]
    clock.now = 1.5
    write(local / "save-10" / "optimizer.bin", b"o" * 50)  # still being written
    assert mirror.sync().pending == ["save-10"]
    clock.now = 3.0  # 1.5 s after its last change: not yet
    assert mirror.sync().stored == []
    assert listed(url) == {}
    clock.now = 3.6
    done = mirror.sync()

    assert done.stored == ["save-10"] and done.bytes == 150
    assert listed(url) == {"save-10": ["save-10/model.bin", "save-10/optimizer.bin"]}
    assert stored(url, "save-10/optimizer.bin") == b"o" * 50


def test_an_unchanged_unit_is_not_uploaded_again(tmp_path: Path, url: str) -> None:
    clock = Clock()
    local = tmp_path / "ckpt"
    mirror = FolderMirror(local, url, settle_s=2.0, clock=clock)
    write(local / "model.pt", b"first")
    mirror.sync(final=True)
    fs, root = url_to_fs(url)
    fs.pipe_file(f"{root}/model.pt", b"changed in storage")  # an upload would overwrite it

    clock.now = 10.0
    assert mirror.sync().stored == []
    assert mirror.sync(final=True).stored == []
    assert stored(url, "model.pt") == b"changed in storage"

    write(local / "model.pt", b"second, longer")  # the trainer saves again
    clock.now = 20.0
    mirror.sync()
    clock.now = 23.0
    assert mirror.sync().stored == ["model.pt"]
    assert stored(url, "model.pt") == b"second, longer"


def test_the_newest_unit_is_stored_first(tmp_path: Path, url: str) -> None:
    local = tmp_path / "ckpt"
    now = time.time()
    write(local / "epoch=1.ckpt", b"1", mtime_s=now - 30)
    write(local / "epoch=3.ckpt", b"3", mtime_s=now - 10)
    write(local / "save-2" / "a", b"2", mtime_s=now - 20)

    done = FolderMirror(local, url).sync(final=True)

    assert done.stored == ["epoch=3.ckpt", "save-2", "epoch=1.ckpt"]


def test_a_rotated_unit_leaves_storage_after_a_newer_one_is_stored(
    tmp_path: Path, url: str
) -> None:
    clock = Clock()
    local = tmp_path / "ckpt"
    mirror = FolderMirror(local, url, settle_s=2.0, clock=clock)
    now = time.time()
    write(local / "save-1" / "model.bin", b"one", mtime_s=now - 60)
    mirror.sync(final=True)
    # A limit of one save: save-2 written, then save-1 deleted.
    write(local / "save-2" / "model.bin", b"two")
    for path in sorted((local / "save-1").iterdir()):
        path.unlink()
    (local / "save-1").rmdir()
    clock.now = 1.0

    kept = mirror.sync()
    assert kept.deleted == [] and kept.pending == ["save-2"]
    assert set(listed(url)) == {"save-1"}  # the only stored save stays
    clock.now = 5.0
    done = mirror.sync()

    assert done.stored == ["save-2"] and done.deleted == ["save-1"]
    assert set(listed(url)) == {"save-2"}
    assert stored(url, "save-1/model.bin") is None
    assert stored(url, "save-2/model.bin") == b"two"


def test_restore_brings_back_what_the_manifest_lists_and_nothing_else(
    tmp_path: Path, url: str
) -> None:
    first = tmp_path / "vm1"
    write(first / "save-5" / "model.bin", b"weights")
    write(first / "save-5" / "nested" / "rng.pt", b"rng")
    write(first / "last.pt", b"last")
    FolderMirror(first, url).sync(final=True)
    fs, root = url_to_fs(url)
    fs.pipe_file(f"{root}/written-straight-to-storage.pt", b"not the mirror's")

    second = tmp_path / "vm2"
    mirror = FolderMirror(second, url, settle_s=0.0)
    assert mirror.restore() == 2

    assert sorted(p.relative_to(second).as_posix() for p in second.rglob("*") if p.is_file()) == [
        "last.pt",
        "save-5/model.bin",
        "save-5/nested/rng.pt",
    ]
    assert (second / "save-5" / "nested" / "rng.pt").read_bytes() == b"rng"
    # Restored units are stored already: nothing goes up again.
    assert mirror.sync(final=True).stored == []
    assert stored(url, "written-straight-to-storage.pt") == b"not the mirror's"


def test_links_out_of_the_folder_are_refused_and_an_inner_link_is_its_file(
    tmp_path: Path, url: str
) -> None:
    secret = tmp_path / "root-only"
    write(secret / "shadow", b"root's secret")
    local = tmp_path / "ckpt"
    write(local / "epoch=1-step=50.ckpt", b"lightning state")
    (local / "last.ckpt").symlink_to("epoch=1-step=50.ckpt")  # Lightning's save_last="link"
    (local / "stolen.ckpt").symlink_to(secret / "shadow")
    (local / "up.ckpt").symlink_to("../root-only/shadow")
    (local / "linked-folder").symlink_to(secret)
    write(local / "save-3" / "model.bin", b"m")
    (local / "save-3" / "inner").symlink_to(secret)
    (local / "save-3" / "key").symlink_to(secret / "shadow")

    done = FolderMirror(local, url).sync(final=True)

    assert sorted(done.stored) == ["epoch=1-step=50.ckpt", "last.ckpt", "save-3"]
    assert listed(url)["save-3"] == ["save-3/model.bin"]
    assert stored(url, "last.ckpt") == b"lightning state"
    for name in ("stolen.ckpt", "up.ckpt", "linked-folder/shadow", "save-3/key"):
        assert stored(url, name) is None
    restored = tmp_path / "vm2"
    FolderMirror(restored, url).restore()
    assert not (restored / "last.ckpt").is_symlink()
    assert (restored / "last.ckpt").read_bytes() == b"lightning state"


def test_a_hostile_manifest_restores_nothing_outside_the_folder(tmp_path: Path, url: str) -> None:
    fs, root = url_to_fs(url)
    fs.makedirs(f"{root}/ok", exist_ok=True)
    fs.pipe_file(f"{root}/ok/a", b"fine")
    fs.pipe_file(f"{root}/escape", b"planted")
    units = {
        "ok": {"files": ["ok/a"]},
        "..": {"files": ["../escape"]},
        "x": {"files": ["x/../../escape"]},
        "y": {"files": ["/etc/escape"]},
        "z": "not an object",
    }
    fs.pipe_file(f"{root}/{MANIFEST}", json.dumps({"units": units}).encode())
    local = tmp_path / "jobs" / "ckpt"

    assert FolderMirror(local, url).restore() == 1

    assert sorted(p.name for p in local.iterdir()) == ["ok"]
    assert not (tmp_path / "jobs" / "escape").exists() and not (tmp_path / "escape").exists()


def test_two_nodes_mirroring_one_url_keep_each_others_units(tmp_path: Path, url: str) -> None:
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    write(node0 / "ckpt-10.pt", b"rank 0")
    write(node1 / "rank1.log", b"rank 1")
    first, second = FolderMirror(node0, url), FolderMirror(node1, url)

    first.sync(final=True)
    second.sync(final=True)
    (node0 / "ckpt-10.pt").unlink()
    write(node0 / "ckpt-20.pt", b"rank 0 again")
    first.sync(final=True)

    assert set(listed(url)) == {"ckpt-20.pt", "rank1.log"}


def test_a_hugging_face_checkpoint_is_stored_only_once_its_trainer_state_is_written(
    tmp_path: Path, url: str
) -> None:
    local = tmp_path / "output_dir"
    write(local / "tmp-checkpoint-20" / "model.safetensors", b"staging")  # renamed when done
    write(local / "checkpoint-10" / "model.safetensors", b"weights")  # cut short by the notice
    mirror = FolderMirror(local, url, settle_s=0.0)

    done = mirror.sync(final=True)

    assert done.stored == [] and sorted(done.pending) == ["checkpoint-10", "tmp-checkpoint-20"]
    write(local / "checkpoint-10" / "trainer_state.json", b"{}")
    assert mirror.sync(final=True).stored == ["checkpoint-10"]
    assert listed(url) == {
        "checkpoint-10": ["checkpoint-10/model.safetensors", "checkpoint-10/trainer_state.json"]
    }


def test_a_local_file_named_as_the_manifest_is_not_uploaded(tmp_path: Path, url: str) -> None:
    local = tmp_path / "ckpt"
    write(local / "model.pt", b"weights")
    write(local / MANIFEST, json.dumps({"units": {"x": {"files": ["x/a"]}}}).encode())

    assert FolderMirror(local, url).sync(final=True).stored == ["model.pt"]
    assert listed(url) == {"model.pt": ["model.pt"]}
