"""A copy of a job, submitted again (``spotline replay``): a recorded job's
copy runs its snapshot, not the originals; local folders may stand in for its
code and data."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from spotline.infra.client.connection import Connection, connect
from spotline.infra.client.errors import ReplayError, SpecError
from spotline.infra.client.packing import DEFAULT_LIMIT_MB
from spotline.infra.client.submission import Published, pack_folders, pack_targets, upload_packs

if TYPE_CHECKING:
    from spotline.infra.client.job import Job


def publish_replay(
    conn: Connection,
    job_id: str,
    description: str | None = None,
    code_dir: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    wait_request_s: int | None = None,
    upload_limit_mb: float = DEFAULT_LIMIT_MB,
) -> Published:
    """Publish the copy (see ``replay``); what was uploaded and sent."""
    from pydantic import ValidationError

    from spotline.infra.client.recording import snapshot_complete, snapshot_digest
    from spotline.shared.domain.lifecycle import job_id_for
    from spotline.shared.domain.spec import JobSpec, describe_validation_error

    job = conn.job_doc(job_id)
    description = description or f"replay of {job.job_id}: {job.spec.description}"[:500]
    # The copy records nothing again: it runs the snapshot, which stays where it is.
    update: dict[str, object] = {"job_id": None, "description": description, "record": False}
    if job.record is not None:
        if not snapshot_complete(job.record):
            raise ReplayError(
                f"job {job.job_id} was recorded, but its snapshot is not whole "
                f"(no {job.record.marker_uri}): `spotline submit` makes it before publishing"
            )
        if job.record.digest is not None:
            try:
                now = snapshot_digest(job.record)
            except FileNotFoundError as err:
                raise ReplayError(f"job {job.job_id}'s snapshot is gone: {err}") from None
            if now != job.record.digest:
                raise ReplayError(
                    f"job {job.job_id}'s snapshot was changed since it was recorded: its files "
                    f"now have the digest {now}, not {job.record.digest} (kept when it was "
                    f"recorded), so the replay would not run what ran; nothing was submitted"
                )
        update |= {
            "code_uri": job.record.code_uri,
            "data_uri": job.record.data_uri,
            # What the VM checks the files it downloads against; not when a
            # local folder stands in for the snapshot's code or data.
            "snapshot_digest": job.record.digest if code_dir is None and data_dir is None else None,
        }
    if wait_request_s is not None:
        update["wait_request_s"] = wait_request_s
    folders = {
        key: Path(folder)
        for key, folder in (("code_uri", code_dir), ("data_uri", data_dir))
        if folder is not None
    }
    packs = pack_folders(folders, upload_limit_mb)
    update |= pack_targets(conn.settings, packs, job.user)
    try:
        spec = JobSpec.model_validate({**job.spec.model_dump(by_alias=True), **update})
    except ValidationError as err:
        raise SpecError(
            describe_validation_error(err).split("; "), f"the replay of {job_id}"
        ) from None
    uploads = upload_packs(conn.settings, packs, job.user)
    data = spec.model_dump_json(exclude_none=True).encode()
    bus, topics = conn.bus(spec.user)
    message_id = bus.publish("submit", data)
    return Published(job_id_for(spec, message_id), message_id, topics["submit"], uploads)


def replay(
    job_id: str,
    *,
    description: str | None = None,
    code_dir: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    wait_request_s: int | None = None,
    workdir: str | os.PathLike[str] | None = None,
    upload_limit_mb: float = DEFAULT_LIMIT_MB,
) -> Job:
    """Submit a copy of a job, as a new job (``spotline replay``).

    A recorded job's copy runs its snapshot, not the originals (which may have
    changed since); the copy records nothing again.

    Args:
        job_id: the job to copy.
        description: the copy's (default: "replay of JOB: ...").
        code_dir: a local folder uploaded and run as the copy's code (as
            ``spotline.submit``'s ``code_dir``).
        data_dir: a local folder uploaded as the copy's ``data_uri``.
        wait_request_s: seconds each machine option is asked for (default: the job's).
        workdir: the local stack's folder (see ``spotline.submit``).
        upload_limit_mb: a folder holding more is refused, its biggest files named.

    Raises:
        JobNotFound: no such job.
        ReplayError: a recorded job whose snapshot is not whole, or was
            changed since it was recorded (its digest is not the one kept).
        SpecError: the copy's spec is not valid.
        InputsError: a folder is missing, has no file or is over the limit.
    """
    from spotline.infra.client.job import Job

    conn = connect(workdir)
    published = publish_replay(
        conn, job_id, description, code_dir, data_dir, wait_request_s, upload_limit_mb
    )
    return Job(published.job_id, connection=conn, published=published)
