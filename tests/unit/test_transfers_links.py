"""The agent (root on a VM) uploads TensorBoard logs from a folder the
trainer (another account) owns: it copies the files there, never what a link
the trainer made points at."""

from __future__ import annotations

from pathlib import Path

from spotline.vm_image.agent.transfers import upload_folder


def test_links_in_the_trainers_folder_are_not_followed(tmp_path: Path) -> None:
    private = tmp_path / "root-only"
    (private / "inner").mkdir(parents=True)
    (private / "shadow").write_text("root's secret")
    (private / "inner" / "key").write_text("another")
    local = tmp_path / "tensorboard"
    (local / "train").mkdir(parents=True)
    (local / "train" / "events.out.tfevents.1").write_bytes(b"a")
    (local / "stolen").symlink_to(private / "shadow")
    (local / "train" / "stolen-dir").symlink_to(private)
    remote = tmp_path / "outputs"

    assert upload_folder(local, remote.as_uri()) == 1

    assert sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*")) == [
        "train",
        "train/events.out.tfevents.1",
    ]


def test_a_folder_that_is_a_link_is_not_uploaded(tmp_path: Path) -> None:
    private = tmp_path / "root-only"
    private.mkdir()
    (private / "shadow").write_text("root's secret")
    local = tmp_path / "tensorboard"
    local.symlink_to(private)

    assert upload_folder(local, (tmp_path / "outputs").as_uri()) == 0
    assert not (tmp_path / "outputs").exists()
