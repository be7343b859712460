"""What a recorded job runs: its snapshot, on every attempt.

``spotline submit`` of a job with ``record`` copies its code and data under
the job's storage before publishing it (shared/domain/recording.py). The VM
reads the snapshot, not the originals, so an attempt after a preemption runs
what the first one ran even if the originals changed meanwhile, and a replay
runs exactly what ran. A snapshot without its marker (a copy cut short, or a
spec published with ``record`` by hand, which copies nothing) is not one:
the job then runs its originals, and says so.
"""

from __future__ import annotations

from spotline.shared import logs
from spotline.shared.contract.assignment import Assignment


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


def _exists(uri: str) -> bool:
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(uri)
    return bool(fs.exists(path))
