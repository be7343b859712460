"""A data set whose copy fails part way (an object deleted between the
listing and its download, a link to nothing, a name that would land outside
the cache) fails the job with the reason, as a missing data set does
(``DataUnavailable``): an error escaping the agent killed it, no JobFinished
was sent, and each new attempt's VM met the same.

Pure: ``fetch_data`` on local and in-memory fsspec folders, no emulators.
"""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from vm_image.agent.job_data import DataUnavailable, fetch_data


def test_a_link_to_nothing_in_the_data_set_is_named(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("x\n")
    (data / "gone.csv").symlink_to(tmp_path / "deleted-meanwhile.csv")

    with pytest.raises(DataUnavailable, match="gone.csv"):
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
