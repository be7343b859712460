"""The job's data set (``data_uri``) on the VM's disk before the trainer starts.

``data_uri`` is any fsspec URL (``gs://`` in the cloud, a local path or the
local stack's storage emulator locally), a folder or a single file; it lands
in ``{workdir}/cache/data/{key}/``, whose path the trainer gets as
``SPOTLINE_DATA_DIR``. The folder is written by the agent and only readable
by the trainer's account: a trainer cannot change what the next job of the
same user on a reused VM reads.

Cache: a reused (cooling, or stopped and booted again) VM keeps the last data
set. Staleness is decided by listing ``data_uri`` again (one listing, no
download) and comparing every object's name, size and version (GCS
generation / ETag / md5, or a local file's mtime) with the listing saved when
the copy was made: any difference downloads the whole set again. One data set
is kept at a time, so the cache never holds more than one job's data.

A data set larger than the disk's free space (counting the cached set it
would replace) is refused before anything is downloaded: a VM after VM would
fail the same way, so the job fails with both sizes in the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from spotline.shared import logs

DATA_DIR_ENV = "SPOTLINE_DATA_DIR"
CACHE_FOLDER = "cache"
DATA_FOLDER = "data"
_FILES = "files"
_MANIFEST = "manifest.json"
# The version fields fsspec backends report, most specific first: gcsfs
# (generation, md5Hash), s3fs (ETag, VersionId), the local filesystem (mtime).
_VERSION_KEYS = ("generation", "md5Hash", "etag", "ETag", "VersionId", "mtime", "updated")


class DataUnavailable(RuntimeError):
    """The data set cannot be made available; the message says why, and the
    job fails with it (another VM would meet the same)."""


def fetch_data(uri: str, workdir: Path) -> Path:
    """The local folder holding ``uri``'s files, downloading them unless the
    cached copy is still current.

    An object listed and gone by its download (the data set changed while it
    was copied) is copied again once from a new listing. What would fail on
    every VM fails the job (``DataUnavailable``) rather than the agent, which
    reports nothing: a listed file that cannot be read (a link to nothing),
    a name that would land outside the folder. Other storage errors still end
    the agent (the reaper's new attempt tries again). A copy cut short is
    never taken for a current one: its manifest is written last.

    Raises:
        DataUnavailable: nothing is stored at ``uri``, it is larger than the
            disk's free space (both sizes named), or it cannot be copied.
    """
    try:
        try:
            return _fetch(uri, workdir)
        except FileNotFoundError as err:
            logs.warning(f"data_uri {uri}: {err} went away while copied; copying again")
            return _fetch(uri, workdir)
    except (FileNotFoundError, ValueError) as err:
        raise DataUnavailable(
            f"data_uri {uri} cannot be copied ({type(err).__name__}: {err}): a link to "
            "nothing, a name outside the folder, or objects deleted while it was copied"
        ) from None


def _fetch(uri: str, workdir: Path) -> Path:
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(uri)
    root = root.rstrip("/") or root
    fs.invalidate_cache(root)  # another process may have written it since
    listing = _listing(fs, root)
    if not listing:
        raise DataUnavailable(f"data_uri {uri}: nothing is stored there")
    cache = workdir / CACHE_FOLDER / DATA_FOLDER
    cache.mkdir(parents=True, exist_ok=True)
    _readable(workdir / CACHE_FOLDER)
    _readable(cache)
    entry = cache / hashlib.sha256(uri.encode()).hexdigest()[:16]
    manifest = {"uri": uri, "objects": listing}
    if _current(entry, manifest):
        logs.info(f"data_uri {uri}: the cached copy is current ({entry})")
        return entry / _FILES
    _make_room(cache)  # one data set at a time; this one is stale or new
    size = sum(item["size"] for item in listing.values())
    free = shutil.disk_usage(cache).free
    if size > free:
        raise DataUnavailable(
            f"data_uri {uri} holds {size} bytes ({_human(size)}), more than the {free} bytes "
            f"({_human(free)}) free on this VM's disk: choose a machine with a larger disk, "
            "or a smaller data set"
        )
    files = entry / _FILES
    files.mkdir(parents=True)
    single = len(listing) == 1 and next(iter(listing)) == ""
    if single:  # a file, not a folder: it keeps its name
        fs.get(root, str(files / root.rsplit("/", 1)[-1]))
    else:
        fs.get(f"{root}/", f"{files}/", recursive=True)
    _readable(entry, recursive=True)
    (entry / _MANIFEST).write_text(json.dumps(manifest, sort_keys=True))
    logs.info(f"data_uri {uri}: {len(listing)} files, {_human(size)} downloaded to {files}")
    return files


def _listing(fs: Any, root: str) -> dict[str, dict[str, Any]]:
    """Every object under ``root`` by relative name ("" when ``root`` is a
    file), with its size and version."""
    found = {root: fs.info(root)} if fs.isfile(root) else fs.find(root, detail=True)
    listing = {}
    for path, info in found.items():
        if info.get("type") == "directory" or path.endswith("/"):
            continue
        name = path[len(root) :].lstrip("/")
        version = {key: str(info[key]) for key in _VERSION_KEYS if info.get(key) is not None}
        listing[name] = {"size": int(info.get("size") or 0), "version": version}
    return listing


def _current(entry: Path, manifest: dict[str, Any]) -> bool:
    """Whether ``entry`` is a complete copy (its manifest is written last)
    of what is stored now."""
    try:
        saved = json.loads((entry / _MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return bool(saved == json.loads(json.dumps(manifest, sort_keys=True)))


def _make_room(cache: Path) -> None:
    for entry in cache.iterdir():
        shutil.rmtree(entry, ignore_errors=True)


def _readable(path: Path, recursive: bool = False) -> None:
    """Readable (and folders enterable) by every account, writable by the
    agent's only: the trainer runs as another account and must not change
    the cached copy."""
    path.chmod(0o755)
    if not recursive:
        return
    for folder, dirs, files in os.walk(path):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o755, follow_symlinks=False)
        for name in files:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                os.chmod(full, 0o644)


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{size} B"
        value /= 1024
    return f"{size} B"
