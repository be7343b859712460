"""Submitting a job: the spec read from fields, a file or a model; checked as
the submit function will check it; its local folders uploaded and, when it
asks to be recorded, its inputs copied; then published."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotline.infra.client.errors import InputsError, SecretInSpec, SpecError, SpecUnreadable
from spotline.infra.client.locations import location_problems

if TYPE_CHECKING:
    from spotline.infra.client.connection import Connection
    from spotline.infra.client.job import Job
    from spotline.shared.domain.spec import JobSpec
    from spotline.shared.settings import Settings


@dataclass(frozen=True)
class Upload:
    """A local folder copied under a job's storage."""

    folder: Path
    target: str  # fsspec URL
    files: int


@dataclass(frozen=True)
class Published:
    """What a submission did, in order: uploads, the recorded snapshot, the message."""

    job_id: str
    message_id: str
    topic: str
    uploads: list[Upload] = field(default_factory=list)
    recorded: str | None = None  # where the snapshot is
    recorded_files: int | None = None  # None: it was whole already, nothing copied


def spec_bytes(spec: Any) -> tuple[bytes, str]:
    """The message to publish for a spec given as fields, a path or a model;
    and what to call it in an error.

    Raises:
        SpecError: a path that cannot be read.
    """
    from spotline.shared.domain.spec import JobSpec

    if isinstance(spec, JobSpec):
        return spec.model_dump_json(exclude_none=True, by_alias=True).encode(), "the job spec"
    if isinstance(spec, dict):
        return json.dumps(spec).encode(), "the job spec"
    if isinstance(spec, str | os.PathLike):
        path = Path(spec)
        try:
            return path.read_bytes(), str(path)
        except OSError as err:
            raise SpecUnreadable(
                [f"cannot read {path}: {err.strerror or err}"], str(path)
            ) from None
    raise TypeError(f"a job spec is a dict, a path or a JobSpec, not {type(spec).__name__}")


def secret_refusals(data: bytes) -> list[str]:
    """A literal value for a secret-like env name, when the spec parses (never
    the value itself); a spec that does not parse is refused with the rest."""
    from spotline.shared.domain.errors import InvalidMessage
    from spotline.shared.domain.secret_env import env_refusals
    from spotline.shared.domain.spec import parse_spec

    try:
        return env_refusals(parse_spec(data).env)
    except InvalidMessage:
        return []


def check_submission(data: bytes, settings: Settings) -> tuple[JobSpec | None, list[str]]:
    """The spec, and why the submit function would refuse it (empty: it takes
    it): the same parsing, node bound and admission checks it runs, with this
    deployment's region and quota (functions/handlers/submit_job.py)."""
    from spotline.shared.domain.admission import refusals
    from spotline.shared.domain.catalog import load_catalog
    from spotline.shared.domain.errors import InvalidMessage
    from spotline.shared.domain.spec import parse_spec, too_many_nodes

    try:
        spec = parse_spec(data)
    except InvalidMessage as err:
        # describe_validation_error joins one problem per field with "; ".
        return None, [f"not a valid job spec: {problem}" for problem in str(err).split("; ")]
    problems = refusals(spec, load_catalog(), settings.region, settings.webhook_allowed_networks)
    too_many = too_many_nodes(spec, settings.max_active_instances)
    return spec, problems + ([too_many] if too_many else [])


def validated(
    conn: Connection, data: bytes, source: str, uploaded: frozenset[str] = frozenset()
) -> JobSpec:
    """The spec, checked before anything is published: as the submit function
    checks it, and its code and data locations hold something
    (``uploaded``: the fields whose folders go up with it, not there yet).

    Raises:
        SecretInSpec: a literal secret in env (checked before anything else).
        SpecError: every reason the submit function would refuse it, and
            every location with nothing stored.
    """
    refused = secret_refusals(data)
    if refused:
        raise SecretInSpec(refused, source)
    spec, problems = check_submission(data, conn.settings)
    if spec is not None:
        problems += location_problems(spec, local=conn.local, uploaded=uploaded)
    if spec is None or problems:
        raise SpecError(problems, source)
    return spec


def submit(
    conn: Connection,
    spec: Any,
    code_dir: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> Published:
    """Check, upload, record and publish (see ``spotline.submit``)."""
    from spotline.shared.domain.lifecycle import job_id_for

    data, source = spec_bytes(spec)
    if code_dir is not None or data_dir is not None:
        data = _with_inputs(conn.settings, data, source, code_dir, data_dir)
    uploaded = frozenset(
        field for field, folder in (("code_uri", code_dir), ("data_uri", data_dir)) if folder
    )
    checked = validated(conn, data, source, uploaded)
    uploads = upload_inputs(conn.settings, checked, code_dir, data_dir)
    recorded, recorded_files = None, None
    if checked.record:
        data, checked, recorded, recorded_files = record_inputs(conn.settings, data, checked)
    # Exactly what `gcloud pubsub topics publish spotline-submit --message=...` sends
    # (on the user's own topic in the per-user mode).
    bus, topics = conn.bus(checked.user)
    message_id = bus.publish("submit", data)
    return Published(
        job_id_for(checked, message_id),
        message_id,
        topics["submit"],
        uploads,
        recorded,
        recorded_files,
    )


def _with_inputs(
    settings: Settings,
    data: bytes,
    source: str,
    code_dir: str | os.PathLike[str] | None,
    data_dir: str | os.PathLike[str] | None,
) -> bytes:
    """The spec pointed at where its local folders will be uploaded (under its
    job id, chosen now when it has none), so it is checked as it will run."""
    from spotline.infra.client.recording import fresh_job_id

    try:
        fields = json.loads(data)
    except ValueError:
        return data  # not JSON: refused with the rest
    if not isinstance(fields, dict):
        return data
    given = {"code_uri": code_dir, "data_uri": data_dir}
    both = [
        f"{key}: given with {key[:4]}_dir; give one"
        for key, v in given.items()
        if v and fields.get(key)
    ]
    if both:
        raise SpecError(both, source)
    job_id = fields.get("job_id") or fresh_job_id("job")
    user = fields.get("user")
    targets = input_targets(
        settings, job_id, code_dir, data_dir, user if isinstance(user, str) else None
    )
    return json.dumps({**fields, "job_id": job_id, **targets}).encode()


def input_targets(
    settings: Settings,
    job_id: str,
    code_dir: str | os.PathLike[str] | None,
    data_dir: str | os.PathLike[str] | None,
    user: str | None = None,
) -> dict[str, str]:
    """Where a job's local folders go: ``jobs/JOB/inputs/code`` and ``inputs/data``
    (under the user's folder in the per-user mode: ``Settings.job_prefix``)."""
    inputs = f"{settings.job_prefix(job_id, user)}/inputs"
    folders = {"code_uri": code_dir, "data_uri": data_dir}
    return {
        key: f"{inputs}/{key.removesuffix('_uri')}" for key, v in folders.items() if v is not None
    }


def upload_inputs(
    settings: Settings,
    spec: JobSpec,
    code_dir: str | os.PathLike[str] | None,
    data_dir: str | os.PathLike[str] | None,
) -> list[Upload]:
    """Copy the local folders to where the spec points (``input_targets``).

    Raises:
        InputsError: a folder holds no file.
    """
    from spotline.infra.client.recording import copy_folder

    assert spec.job_id is not None or (code_dir is None and data_dir is None)
    targets = input_targets(settings, spec.job_id or "", code_dir, data_dir, spec.user)
    uploads = []
    for key, folder in (("code_uri", code_dir), ("data_uri", data_dir)):
        if folder is None:
            continue
        local = Path(folder)
        try:
            copied = copy_folder(local.resolve().as_uri(), targets[key])
        except FileNotFoundError as err:
            raise InputsError(str(err)) from None
        uploads.append(Upload(local, targets[key], copied))
    return uploads


def record_inputs(
    settings: Settings, data: bytes, spec: JobSpec
) -> tuple[bytes, JobSpec, str, int | None]:
    """A recorded job's snapshot, copied before it is published (see
    ``spotline.shared.domain.recording``); the job gets an id now when it has
    none, since the snapshot lives under the job's storage. The message and
    spec to publish, where the snapshot is, and the files copied (None: it
    was whole already).

    Raises:
        InputsError: nothing is stored under code_uri or data_uri, or the job
            id's snapshot is of other sources.
    """
    from spotline.infra.client.recording import fresh_job_id, snapshot_digest, take_snapshot
    from spotline.shared.domain.recording import record_for
    from spotline.shared.domain.spec import parse_spec

    if spec.job_id is None:
        data = json.dumps({**json.loads(data), "job_id": fresh_job_id("rec")}).encode()
        spec = parse_spec(data)
    assert spec.job_id is not None
    record = record_for(settings.job_prefix(spec.job_id, spec.user), spec)
    assert record is not None
    try:
        copied = take_snapshot(record, spec)
        digest = snapshot_digest(record)
    except (FileNotFoundError, FileExistsError) as err:
        raise InputsError(f"cannot record it: {err}") from None
    # Kept in Firestore with the record: what a replay checks the snapshot against.
    data = json.dumps({**json.loads(data), "snapshot_digest": digest}).encode()
    spec = parse_spec(data)
    where = record.marker_uri.rsplit("/", 1)[0]
    return data, spec, where, None if copied is None else sum(copied.values())


def submit_job(
    spec: Any,
    *,
    code_dir: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    follow: bool = False,
    workdir: str | os.PathLike[str] | None = None,
) -> Job:
    """Submit a training job, as ``spotline submit`` does.

    The spec is checked first exactly as the submit function will check it
    (the same model, the admission checks against the catalog, this
    deployment's region and its quota): a spec it would refuse is never
    published.

    Args:
        spec: the job spec: a dict of its fields, the path of a JSON file,
            or a ``JobSpec``.
        code_dir: a local folder uploaded under the job's storage
            (``jobs/JOB/inputs/code``) and run as its ``code_uri``.
        data_dir: a local folder uploaded as its ``data_uri`` (``inputs/data``).
        follow: watch the job until it ends (``Job.watch``) before returning.
        workdir: the local stack's folder (default: ``$SPOTLINE_WORKDIR``,
            else ``.spotline`` under the working folder).

    Returns:
        The job (``Job.id``; ``Job.published`` says what was uploaded and sent).

    Raises:
        SpecError: the spec would be refused; ``problems`` names every bad field.
        InputsError: a folder has no file, or a recorded job's inputs cannot be copied.
        NotConnected: no spotline found (``spotline up``, or ``spotline deploy``).
    """
    from spotline.infra.client.connection import connect
    from spotline.infra.client.job import Job

    conn = connect(workdir)
    published = submit(conn, spec, code_dir, data_dir)
    job = Job(published.job_id, connection=conn, published=published)
    if follow:
        job.watch()
    return job


def validate(spec: Any, *, workdir: str | os.PathLike[str] | None = None) -> JobSpec:
    """The spec as spotline reads it (defaults filled in), checked as
    ``submit`` checks it; nothing is published (``spotline submit --dry-run``).

    Raises:
        SpecError: the spec would be refused; ``problems`` names every bad field.
    """
    from spotline.infra.client.connection import connect

    conn = connect(workdir)
    data, source = spec_bytes(spec)
    return validated(conn, data, source)
