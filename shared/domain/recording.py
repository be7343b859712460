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
"""

from __future__ import annotations

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


def record_for(job_prefix: str, spec: JobSpec) -> Record | None:
    """The snapshot's place under the job's prefix; None when it is not recorded."""
    if not spec.record:
        return None
    root = f"{job_prefix.rstrip('/')}/{RECORD_FOLDER}"
    return Record(
        code_uri=f"{root}/code" if spec.code_uri else None,
        data_uri=f"{root}/data" if spec.data_uri else None,
        marker_uri=f"{root}/{MARKER}",
    )
