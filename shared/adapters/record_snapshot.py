"""Whether a recorded job's snapshot is whole, read from storage: the one
check the CLI (before copying again, and before a replay) and the VM (before
running the snapshot instead of the originals) both make.

The marker is written last (infra/cli/recording.py), so a snapshot without it
was cut short, or never made."""

from __future__ import annotations

from shared.domain.recording import Record


def snapshot_complete(record: Record) -> bool:
    """Whether the snapshot was copied whole (its marker exists)."""
    from fsspec.core import url_to_fs

    fs, marker = url_to_fs(record.marker_uri)
    fs.invalidate_cache(marker.rsplit("/", 1)[0])  # a listing cached before the marker was written
    return bool(fs.exists(marker))
