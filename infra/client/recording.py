"""What is copied before a job is published: a recorded job's snapshot
(``spotline.shared.domain.recording`` says why here), and the local folders
of a submission or a replay.

Copies go through fsspec, so ``gs://`` (or the storage emulator) and
``file://`` read and write alike; the user's own credentials do the reading.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotline.shared.domain.recording import Record
    from spotline.shared.domain.spec import JobSpec

_CHUNK = 1 << 20


def copy_folder(source: str, target: str) -> int:
    """Copy every file under ``source`` to the same relative names under
    ``target`` (fsspec URLs), after removing whatever ``target`` held; the
    number of files copied.

    Raises:
        FileNotFoundError: nothing is stored under ``source``.
    """
    from fsspec.core import url_to_fs

    source_fs, source_root = url_to_fs(source)
    source_root = source_root.rstrip("/")
    source_fs.invalidate_cache(source_root)  # another process may have written it
    files = [path for path in source_fs.find(source_root) if not path.endswith("/")]
    if not files:
        raise FileNotFoundError(f"nothing stored under {source}")
    target_fs, target_root = url_to_fs(target)
    target_root = target_root.rstrip("/")
    if target_fs.exists(target_root):  # a copy cut short: none of it is kept
        target_fs.rm(target_root, recursive=True)
    for path in files:
        relative = path[len(source_root) :].lstrip("/") or path.rsplit("/", 1)[-1]
        destination = f"{target_root}/{relative}"
        target_fs.makedirs(destination.rsplit("/", 1)[0], exist_ok=True)
        with source_fs.open(path, "rb") as read, target_fs.open(destination, "wb") as write:
            shutil.copyfileobj(read, write, _CHUNK)
    return len(files)


def snapshot_complete(record: Record) -> bool:
    """Whether the snapshot was copied whole (its marker is written last)."""
    from fsspec.core import url_to_fs

    fs, marker = url_to_fs(record.marker_uri)
    fs.invalidate_cache(marker.rsplit("/", 1)[0])
    return bool(fs.exists(marker))


def take_snapshot(record: Record, spec: JobSpec) -> dict[str, int] | None:
    """Copy the spec's code and data folders to the record's place, then write
    the marker; the files copied per folder. None: a whole snapshot is there
    already (the same job id submitted again), and nothing is copied twice.

    Raises:
        FileNotFoundError: nothing is stored under code_uri or data_uri.
        FileExistsError: the whole snapshot there is of other sources (the
            job id was used with another code_uri or data_uri): the job would
            run one code and a replay another.
    """
    from fsspec.core import url_to_fs

    if snapshot_complete(record):
        fs, marker = url_to_fs(record.marker_uri)
        with fs.open(marker, "r") as read:
            kept = json.loads(read.read())
        sources = {"code_uri": spec.code_uri, "data_uri": spec.data_uri}
        if {key: kept.get(key) for key in sources} != sources:
            raise FileExistsError(
                f"{record.marker_uri.rsplit('/', 1)[0]} already holds a snapshot of "
                f"code_uri {kept.get('code_uri')}, data_uri {kept.get('data_uri')}, not of "
                f"code_uri {spec.code_uri}, data_uri {spec.data_uri}: give the job another job_id"
            )
        return None
    copied: dict[str, int] = {}
    for source, target in ((spec.code_uri, record.code_uri), (spec.data_uri, record.data_uri)):
        if source and target:
            copied[target] = copy_folder(source, target)
    fs, marker = url_to_fs(record.marker_uri)
    fs.makedirs(marker.rsplit("/", 1)[0], exist_ok=True)
    body = {"code_uri": spec.code_uri, "data_uri": spec.data_uri, "files": copied}
    with fs.open(marker, "w") as out:
        out.write(json.dumps(body, indent=2))
    return copied


def snapshot_digest(record: Record) -> str:
    """The digest of the snapshot as it is stored now (``manifest_digest``
    over the code and data folders' files, the marker left out).

    Raises:
        FileNotFoundError: a folder of the record holds no file.
    """
    from fsspec.core import url_to_fs

    from spotline.shared.domain.recording import manifest_digest

    files: list[tuple[str, str]] = []
    for label, uri in (("code", record.code_uri), ("data", record.data_uri)):
        if uri is None:
            continue
        fs, root = url_to_fs(uri)
        root = root.rstrip("/")
        fs.invalidate_cache(root)
        paths = [path for path in fs.find(root) if not path.endswith("/")]
        if not paths:
            raise FileNotFoundError(f"nothing stored under {uri}")
        for path in paths:
            digest = hashlib.sha256()
            with fs.open(path, "rb") as read:
                while chunk := read.read(_CHUNK):
                    digest.update(chunk)
            files.append((f"{label}/{path[len(root) :].lstrip('/')}", digest.hexdigest()))
    return manifest_digest(files)


def fresh_job_id(stem: str) -> str:
    """A job id chosen before publishing, when its storage must be written
    first (a message's own id is known only once published); never of the
    form spotline derives from message ids ('j' and 12 hex digits)."""
    return f"{stem}-{secrets.token_hex(5)}"
