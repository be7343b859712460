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
from spotline.infra.client.packing import DEFAULT_LIMIT_MB

if TYPE_CHECKING:
    from collections.abc import Callable

    from spotline.infra.client.connection import Connection
    from spotline.infra.client.job import Job
    from spotline.infra.client.packing import Pack
    from spotline.shared.domain.spec import JobSpec
    from spotline.shared.settings import Settings


@dataclass(frozen=True)
class Upload:
    """A local folder shipped to storage by its content's address."""

    folder: Path
    target: str  # fsspec URL: the job's code_uri or data_uri
    files: int
    size: int  # bytes
    written: int  # files this upload wrote; 0: the same content was there already


@dataclass(frozen=True)
class Published:
    """What a submission did, in order: uploads, the recorded snapshot, the message."""

    job_id: str
    message_id: str
    topic: str
    uploads: list[Upload] = field(default_factory=list)
    recorded: str | None = None  # where the snapshot is
    recorded_files: int | None = None  # None: it was whole already, nothing copied


# The spec's local folders (a spec file's, for ``spotline submit``): never published.
LOCAL_FIELDS = {"code_dir": "code_uri", "data_dir": "data_uri"}


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
    *,
    upload_limit_mb: float = DEFAULT_LIMIT_MB,
    on_packed: Callable[[str, Pack], None] | None = None,
) -> Published:
    """Check, upload, record and publish (see ``spotline.submit``);
    ``on_packed`` hears of each folder packed, before anything is uploaded."""
    from spotline.shared.domain.lifecycle import job_id_for

    data, checked, packs = prepared(conn, spec, code_dir, data_dir, upload_limit_mb, on_packed)
    uploads = upload_packs(conn.settings, packs, checked.user)
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


def prepared(
    conn: Connection,
    spec: Any,
    code_dir: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    upload_limit_mb: float = DEFAULT_LIMIT_MB,
    on_packed: Callable[[str, Pack], None] | None = None,
) -> tuple[bytes, JobSpec, dict[str, Pack]]:
    """The message to publish, its spec checked, and its folders packed;
    nothing uploaded yet (``spotline submit --dry-run`` stops here).

    Raises:
        InputsError: a folder is missing, unreadable, empty or over the limit.
        SpecError: the spec would be refused.
    """
    data, source = spec_bytes(spec)
    data, folders = local_folders(data, spec, code_dir, data_dir)
    packs = pack_folders(folders, upload_limit_mb)
    for key, packed in packs.items():
        if on_packed is not None:
            on_packed(key, packed)
    if packs:
        data = _pointed_at(conn.settings, data, source, packs)
    return data, validated(conn, data, source, frozenset(packs)), packs


def local_folders(
    data: bytes,
    spec: Any,
    code_dir: str | os.PathLike[str] | None,
    data_dir: str | os.PathLike[str] | None,
) -> tuple[bytes, dict[str, Path]]:
    """The message without the spec's own ``code_dir``/``data_dir`` (local
    paths never travel), and the folders to upload by the field they become.
    The spec's folders are relative to its file (to the working folder for a
    dict); an argument given here takes the place of the spec's."""
    folders: dict[str, Path] = {}
    try:
        fields = json.loads(data)
    except ValueError:
        fields = None  # not JSON: refused with the rest
    if isinstance(fields, dict) and any(key in fields for key in LOCAL_FIELDS):
        base = Path(spec).parent if isinstance(spec, str | os.PathLike) else Path()
        for key, field_name in LOCAL_FIELDS.items():
            given = fields.pop(key, None)
            if isinstance(given, str) and given:
                folders[field_name] = base / Path(given).expanduser()
        data = json.dumps(fields).encode()
    for field_name, folder in (("code_uri", code_dir), ("data_uri", data_dir)):
        if folder is not None:
            folders[field_name] = Path(folder)
    return data, folders


def pack_folders(folders: dict[str, Path], limit_mb: float) -> dict[str, Pack]:
    """Each folder's files to upload (``packing``).

    Raises:
        InputsError: a folder is missing, unreadable, empty or over the limit.
    """
    from spotline.infra.client.packing import pack

    return {field_name: pack(folder, limit_mb) for field_name, folder in folders.items()}


def _pointed_at(settings: Settings, data: bytes, source: str, packs: dict[str, Pack]) -> bytes:
    """The spec pointed at where its folders go, so it is checked as it will run."""
    try:
        fields = json.loads(data)
    except ValueError:
        return data  # not JSON: refused with the rest
    if not isinstance(fields, dict):
        return data
    both = [f"{key}: given with {key[:4]}_dir; give one" for key in packs if fields.get(key)]
    if both:
        raise SpecError(both, source)
    user = fields.get("user")
    targets = pack_targets(settings, packs, user if isinstance(user, str) else None)
    return json.dumps({**fields, **targets}).encode()


def pack_targets(settings: Settings, packs: dict[str, Pack], user: str | None) -> dict[str, str]:
    """The URL each pack's field gets: ``{root}/code/{sha256}/files``, where
    the root is the user's own folder in the per-user mode (the only one that
    user's VMs may read: ``Settings.user_root``), else the storage root."""
    from spotline.infra.client.uploads import pack_uri

    root = settings.user_root(user)
    return {key: pack_uri(root, key, packed) for key, packed in packs.items()}


def upload_packs(settings: Settings, packs: dict[str, Pack], user: str | None) -> list[Upload]:
    """Upload each pack where ``pack_targets`` points, unless it is there already.

    Raises:
        InputsError: a file changed while it was uploaded, or storage refused it.
    """
    from spotline.infra.client.uploads import ship

    uploads = []
    for key, packed in packs.items():
        try:
            shipped = ship(settings.user_root(user), key, packed)
        except OSError as err:
            raise InputsError(f"{packed.folder} could not be uploaded: {err}") from None
        uploads.append(
            Upload(packed.folder, shipped.uri, len(packed.files), packed.size, shipped.written)
        )
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
    upload_limit_mb: float = DEFAULT_LIMIT_MB,
) -> Job:
    """Submit a training job, as ``spotline submit`` does.

    The spec is checked first exactly as the submit function will check it
    (the same model, the admission checks against the catalog, this
    deployment's region and its quota): a spec it would refuse is never
    published.

    Args:
        spec: the job spec: a dict of its fields, the path of a JSON file,
            or a ``JobSpec``.
        code_dir: a local folder uploaded and run as the job's ``code_uri``:
            its files that ``.gitignore`` and ``.spotlineignore`` keep, stored
            by the address of their content (``STORAGE_ROOT/code/SHA256/files``),
            so an unchanged folder is not uploaded again. A spec's own
            ``code_dir`` is relative to its file.
        data_dir: a local folder uploaded the same way as its ``data_uri``
            (``STORAGE_ROOT/data/SHA256/files``).
        follow: watch the job until it ends (``Job.watch``) before returning.
        workdir: the local stack's folder (default: ``$SPOTLINE_WORKDIR``,
            else ``.spotline`` under the working folder).
        upload_limit_mb: a folder holding more is refused, its biggest files named.

    Returns:
        The job (``Job.id``; ``Job.published`` says what was uploaded and sent).

    Raises:
        SpecError: the spec would be refused; ``problems`` names every bad field.
        InputsError: a folder is missing, has no file or is over the limit, or a
            recorded job's inputs cannot be copied.
        NotConnected: no spotline found (``spotline up``, or ``spotline deploy``).
    """
    from spotline.infra.client.connection import connect
    from spotline.infra.client.job import Job

    conn = connect(workdir)
    published = submit(conn, spec, code_dir, data_dir, upload_limit_mb=upload_limit_mb)
    job = Job(published.job_id, connection=conn, published=published)
    if follow:
        job.watch()
    return job


def validate(spec: Any, *, workdir: str | os.PathLike[str] | None = None) -> JobSpec:
    """The spec as spotline reads it (defaults filled in), checked as
    ``submit`` checks it; nothing is uploaded or published (``spotline submit
    --dry-run``). A spec's ``code_dir`` or ``data_dir`` is packed, not uploaded.

    Raises:
        SpecError: the spec would be refused; ``problems`` names every bad field.
        InputsError: a folder is missing, unreadable, empty or over the limit.
    """
    from spotline.infra.client.connection import connect

    conn = connect(workdir)
    return prepared(conn, spec)[1]
