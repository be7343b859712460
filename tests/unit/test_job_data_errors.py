"""A data set whose copy fails part way. An object deleted between the
listing and its download is copied again from a new listing; what fails on
every VM (a link to nothing, a name that would land outside the cache) fails
the job with the reason, as a missing data set does (``DataUnavailable``).
Before, each error escaped the agent: it stopped with no JobFinished, and
each new attempt's VM met the same.

Pure: ``fetch_data`` on local and in-memory fsspec folders, no emulators;
the one stand-in is a storage whose contents change during the first copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from spotline.vm_image.agent.job_data import DataUnavailable, fetch_data


def test_a_link_to_nothing_in_the_data_set_is_named(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("x\n")
    (data / "gone.csv").symlink_to(tmp_path / "deleted-meanwhile.csv")

    with pytest.raises(DataUnavailable, match=r"gone\.csv"):
        fetch_data(str(data), tmp_path / "vm")
    # Nothing half-copied is taken for a current copy by the next job.
    assert not list((tmp_path / "vm").glob("cache/data/*/manifest.json"))


def test_an_object_named_outside_the_folder_is_refused(tmp_path: Path) -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe("/escape/ok.txt", b"ok")
    fs.pipe("/escape/a/../../../outside.txt", b"not under data_uri")
    try:
        with pytest.raises(DataUnavailable, match="memory:///escape"):
            fetch_data("memory:///escape", tmp_path / "vm")
    finally:
        fs.rm("/escape", recursive=True)
    assert not list(tmp_path.rglob("outside.txt"))


class ChangedDuringCopy(MemoryFileSystem):
    """In-memory storage where another writer deletes ``old.csv`` (and adds
    ``new.csv``) after it was listed, just before its download."""

    protocol = "changedduringcopy"
    changed = False

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        return MemoryFileSystem._strip_protocol(str(path).replace(f"{cls.protocol}://", "/", 1))

    def get_file(self, rpath: Any, lpath: Any, *args: Any, **kwargs: Any) -> Any:
        if str(rpath).endswith("old.csv") and not ChangedDuringCopy.changed:
            ChangedDuringCopy.changed = True
            self.rm("/moving/old.csv")
            self.pipe("/moving/new.csv", b"new")
        return super().get_file(rpath, lpath, *args, **kwargs)


def test_a_data_set_changed_during_the_copy_is_copied_again(tmp_path: Path) -> None:
    fsspec.register_implementation(ChangedDuringCopy.protocol, ChangedDuringCopy, clobber=True)
    fs = ChangedDuringCopy()
    fs.pipe("/moving/keep.csv", b"keep")
    fs.pipe("/moving/old.csv", b"old")
    try:
        files = fetch_data("changedduringcopy:///moving", tmp_path / "vm")
    finally:
        fs.rm("/moving", recursive=True)
    assert sorted(path.name for path in files.iterdir()) == ["keep.csv", "new.csv"]
    assert (files / "new.csv").read_bytes() == b"new"
