"""What a recorded job runs: its snapshot, on every attempt.

``spotline submit`` of a job with ``record`` copies its code and data under
the job's storage before publishing it (shared/domain/recording.py). The VM
reads the snapshot, not the originals, so an attempt after a preemption runs
what the first one ran even if the originals changed meanwhile, and a replay
runs exactly what ran. A snapshot without its marker (a copy cut short, or a
spec published with ``record`` by hand, which copies nothing) is not one:
the job then runs its originals, and says so.

The snapshot sits in the bucket, where more than its owner may write. Its
digest, kept in Firestore when it was recorded, comes with the assignment
(the record's, or a replay's ``snapshot_digest``): the agent computes it
again over the files it downloaded, the very ones the trainer will run, and
refuses to start on a mismatch, naming both.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from spotline.shared import logs
from spotline.shared.contract.assignment import Assignment
from spotline.shared.domain.recording import manifest_digest

_CHUNK = 1 << 20


class SnapshotChanged(RuntimeError):
    """The downloaded snapshot is not what was recorded; the message names both digests."""


def job_sources(assignment: Assignment) -> tuple[str | None, str | None]:
    """The ``code_uri`` and ``data_uri`` the job runs."""
    spec = assignment.spec
    record = assignment.record
    if record is None:
        return spec.code_uri, spec.data_uri
    if not _exists(record.marker_uri):
        logs.warning(
            f"the job's record has no {record.marker_uri}: it was not made (or not finished), "
            "so this attempt runs the originals"
        )
        return spec.code_uri, spec.data_uri
    return record.code_uri or spec.code_uri, record.data_uri or spec.data_uri


def expected_digest(
    assignment: Assignment, code_uri: str | None, data_uri: str | None
) -> str | None:
    """The digest the job's sources must have: its record's, when it runs
    its snapshot (``job_sources``), or a replay's; None: nothing to check
    (not recorded, recorded before digests were kept, or running originals)."""
    spec, record = assignment.spec, assignment.record
    if record is None:
        return spec.snapshot_digest
    snapshot = (record.code_uri or spec.code_uri, record.data_uri or spec.data_uri)
    return record.digest if (code_uri, data_uri) == snapshot else None


def check_snapshot(expected: str | None, code_dir: Path | None, data_dir: Path | None) -> None:
    """Compare the downloaded code and data with the recorded digest.

    Raises:
        SnapshotChanged: they differ.
    """
    if expected is None:
        return
    files: list[tuple[str, str]] = []
    for label, folder in (("code", code_dir), ("data", data_dir)):
        if folder is not None:
            files += [(f"{label}/{name}", digest) for name, digest in _file_digests(folder)]
    now = manifest_digest(files)
    if now != expected:
        raise SnapshotChanged(
            f"the recorded snapshot was changed since it was recorded: the files downloaded "
            f"have the digest {now}, not {expected} (kept when it was recorded); not run"
        )


def _file_digests(folder: Path) -> list[tuple[str, str]]:
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root, name)
            digest = hashlib.sha256()
            with path.open("rb") as read:
                while chunk := read.read(_CHUNK):
                    digest.update(chunk)
            found.append((path.relative_to(folder).as_posix(), digest.hexdigest()))
    return found


def _exists(uri: str) -> bool:
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(uri)
    return bool(fs.exists(path))
