"""The ``record`` switch: a snapshot of a job's code and data, kept
under the job's own storage prefix, that ``spotline replay`` runs instead of
the (possibly changed) originals.

Where the copy runs: in the CLI, before the submission is published
(``spotline.infra.cli.recording``). A function would have to stream a data set within
its time limit and hold storage rights it otherwise does not need; the CLI
runs where the user's own credentials already read the originals, and a
Pub/Sub redelivery never reaches it, so nothing is copied twice. The submit
function only writes down where the snapshot is (``record_for``), from the
job id and the storage root alone. A copy is complete once its marker
exists: the marker is written last, so a copy cut short is made again and
never taken for a whole one.

The snapshot sits in the bucket, where more than the job's owner may write
(every VM of the shared account). So the CLI sends the snapshot's digest
(``snapshot_digest``: SHA-256 over each file's relative name and SHA-256)
with the submission, the submit function keeps it in Firestore with the
record (which no VM can write), and ``spotline replay`` computes it again
before running the snapshot: a rewritten one is refused, naming both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from spotline.shared.domain.spec import JobSpec

RECORD_FOLDER = "record"
MARKER = "RECORD_COMPLETE.json"


class Record(BaseModel):
    """Where a recorded job's snapshot lives (fsspec URLs of folders)."""

    model_config = ConfigDict(frozen=True)

    code_uri: str | None = None
    data_uri: str | None = None
    marker_uri: str
    # The snapshot's digest as its submitter computed it (manifest_digest);
    # None for a job recorded before digests were kept.
    digest: str | None = None


def record_for(job_prefix: str, spec: JobSpec) -> Record | None:
    """The snapshot's place under the job's prefix; None when it is not recorded."""
    if not spec.record:
        return None
    root = f"{job_prefix.rstrip('/')}/{RECORD_FOLDER}"
    return Record(
        code_uri=f"{root}/code" if spec.code_uri else None,
        data_uri=f"{root}/data" if spec.data_uri else None,
        marker_uri=f"{root}/{MARKER}",
        digest=spec.snapshot_digest,
    )


def manifest_digest(files: Iterable[tuple[str, str]]) -> str:
    """The digest of a snapshot from its files: (name relative to the
    record's folder, e.g. ``code/train.py``; the file's SHA-256 hex). The
    order does not matter; a name or a content changed, added or removed
    changes it."""
    lines = sorted(f"{name}\0{digest}\n" for name, digest in files)
    return hashlib.sha256("".join(lines).encode()).hexdigest()
