"""The storage paths against a Cloud Storage emulator, through gcsfs: what a VM
does with a ``gs://`` checkpoint folder, code_uri and TensorBoard logs.

GCS differs from a disk where these paths could break: no directories (an
empty prefix does not exist), copies instead of renames, recursive copies that
nest a folder once the target "exists", and gcsfs's per-process listings cache.
"""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest
import torch
from fsspec.core import url_to_fs

from spotline.infra.localstack.storage import StorageEmulator
from spotline.torch import (
    list_checkpoints,
    load_latest_checkpoint,
    save_checkpoint,
)
from spotline.vm_image.agent.transfers import download_folder, upload_folder
from spotline.vm_image.trainers.checkpoint_files import latest_checkpoint, latest_saved_state
from spotline.vm_image.trainers.state_mirror import MirroredFolder


def _save(checkpoint_dir: str, step: int, model: torch.nn.Module | None = None) -> str:
    model = model or torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return save_checkpoint(
        checkpoint_dir, model=model, optimizer=optimizer, epoch=1, step=step, step_in_epoch=3
    )


def _objects(storage_emulator: StorageEmulator, prefix: str) -> list[str]:
    """The object names under ``prefix``, listed by a filesystem of its own (no
    cache shared with the code under test)."""
    fs = fsspec.filesystem("gs", skip_instance_cache=True)
    return sorted(path.rsplit("/", 1)[-1] for path in fs.find(prefix.removeprefix("gs://")))


def test_the_filesystem_is_gcsfs_on_the_emulator(
    gcs: str, storage_emulator: StorageEmulator
) -> None:
    fs, _ = url_to_fs(gcs)
    assert type(fs).__module__.startswith("gcsfs")
    fs.pipe(f"{gcs.removeprefix('gs://')}/probe", b"x")
    # The object is in the emulator's bucket, not on any local path.
    assert _objects(storage_emulator, gcs) == ["probe"]


def test_checkpoints_upload_list_latest_and_download(
    gcs: str, storage_emulator: StorageEmulator
) -> None:
    checkpoint_dir = f"{gcs}/jobs/j1/checkpoints"
    model = torch.nn.Linear(4, 2)
    uris = [_save(checkpoint_dir, step, model) for step in (5, 12, 30)]

    assert uris[-1] == f"{checkpoint_dir}/ckpt-000000000030.pt"
    # keep=2: the oldest went; no temporary object is left behind.
    assert _objects(storage_emulator, checkpoint_dir) == [
        "ckpt-000000000012.pt",
        "ckpt-000000000030.pt",
    ]
    assert list_checkpoints(checkpoint_dir) == uris[1:]
    assert latest_checkpoint(checkpoint_dir) == uris[-1]
    assert latest_saved_state(checkpoint_dir) == uris[-1]
    loaded = load_latest_checkpoint(checkpoint_dir)
    assert loaded is not None and (loaded.step, loaded.epoch, loaded.step_in_epoch) == (30, 1, 3)
    assert torch.equal(loaded.model["weight"], model.state_dict()["weight"])


def test_an_empty_prefix_holds_no_checkpoint(gcs: str) -> None:
    # Nothing was ever written here: on GCS the "folder" does not exist at all.
    assert latest_checkpoint(f"{gcs}/jobs/none/checkpoints") is None
    assert latest_saved_state(f"{gcs}/jobs/none/checkpoints") is None
    assert load_latest_checkpoint(f"{gcs}/jobs/none/checkpoints") is None


def test_a_checkpoint_written_elsewhere_since_the_last_listing_is_seen(gcs: str) -> None:
    checkpoint_dir = f"{gcs}/jobs/j2/checkpoints"
    _save(checkpoint_dir, 7)
    assert latest_checkpoint(checkpoint_dir) == f"{checkpoint_dir}/ckpt-000000000007.pt"
    # Another writer (the trainer's process, a next attempt) adds a newer one;
    # this process's gcsfs has the folder's old listing cached.
    other = fsspec.filesystem("gs", skip_instance_cache=True)
    fs, root = url_to_fs(checkpoint_dir)
    other.pipe(f"{root}/ckpt-000000000009.pt", fs.cat(f"{root}/ckpt-000000000007.pt"))

    assert latest_checkpoint(checkpoint_dir) == f"{checkpoint_dir}/ckpt-000000000009.pt"


def test_folders_go_up_and_come_down_at_the_same_names_every_time(
    gcs: str, storage_emulator: StorageEmulator, tmp_path: Path
) -> None:
    local = tmp_path / "tensorboard"
    (local / "train").mkdir(parents=True)
    (local / "train" / "events.out.tfevents.1").write_bytes(b"a")
    (local / "events.out.tfevents.2").write_bytes(b"b")
    remote = f"{gcs}/jobs/j3/outputs/tensorboard"

    assert upload_folder(local, remote) == 2
    (local / "events.out.tfevents.2").write_bytes(b"bb")  # the trainer appended
    assert upload_folder(local, remote) == 2  # again, as the agent does each 30 s
    fs, root = url_to_fs(remote)
    assert sorted(fs.find(root)) == [
        f"{root}/events.out.tfevents.2",
        f"{root}/train/events.out.tfevents.1",
    ]  # no tensorboard/tensorboard/... after the second upload
    assert fs.cat(f"{root}/events.out.tfevents.2") == b"bb"

    fetched = tmp_path / "fetched"
    assert download_folder(remote, fetched) == 2
    assert (fetched / "train" / "events.out.tfevents.1").read_bytes() == b"a"
    assert (fetched / "events.out.tfevents.2").read_bytes() == b"bb"
    assert upload_folder(tmp_path / "missing", f"{gcs}/jobs/j3/none") == 0


def test_a_missing_code_uri_fails_with_its_name(gcs: str, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing stored under gs://"):
        download_folder(f"{gcs}/no-such-code", tmp_path / "code")


def test_a_state_written_locally_is_mirrored_up_and_back_down(
    gcs: str, storage_emulator: StorageEmulator, tmp_path: Path
) -> None:
    """Keras' state: written on the VM's disk, copied to the bucket after each
    save, copied back into a new VM's folder before training starts."""
    checkpoint_dir = f"{gcs}/jobs/j4/checkpoints"
    first = MirroredFolder(checkpoint_dir, staging=tmp_path / "vm1")
    assert first.remote and first.pull(["state.h5", "meta.json"]) == []  # nothing saved yet
    (first.local / "state.h5").write_bytes(b"weights-1")
    (first.local / "meta.json").write_text('{"epoch": 1}')
    assert first.push(["state.h5", "meta.json", "absent"]) == ["state.h5", "meta.json"]
    (first.local / "state.h5").write_bytes(b"weights-2")
    assert first.push(["state.h5"]) == ["state.h5"]
    assert _objects(storage_emulator, checkpoint_dir) == ["meta.json", "state.h5"]

    second = MirroredFolder(checkpoint_dir, staging=tmp_path / "vm2")
    assert second.pull(["state.h5", "meta.json"]) == ["state.h5", "meta.json"]
    assert (second.local / "state.h5").read_bytes() == b"weights-2"
    assert (second.local / "meta.json").read_text() == '{"epoch": 1}'
