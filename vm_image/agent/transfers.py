"""Folders between the VM's disk and storage (any fsspec URL; ``gs://`` in the cloud).

Cloud Storage has no directories: a "folder" is a name prefix, an empty one
does not exist, and fsspec's recursive copies nest the source folder inside
the target when the target "exists" (after the first upload) unless the source
ends with ``/``. Both functions therefore copy folder *contents*, so every
call lands the files at the same names, the first time and every time after.
fsspec is imported on first use: the agent's start does not pay for gcsfs.
"""

from __future__ import annotations

from pathlib import Path


def restore_modes(remote: str, local: Path) -> int:
    """Make executable the files an uploaded folder's manifest says are
    (storage keeps no mode); the number changed. Nothing for a folder
    uploaded another way, or a manifest that cannot be read.

    Only files under ``local``, never through a link: the names come from
    storage.
    """
    import json

    from fsspec.core import url_to_fs

    from spotline.shared.contract.uploads import EXECUTABLE, manifest_uri

    manifest = manifest_uri(remote)
    if manifest is None:
        return 0
    fs, path = url_to_fs(manifest)
    try:
        entries = json.loads(fs.cat(path))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    root = local.resolve()
    changed = 0
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("mode") != EXECUTABLE:
            continue
        target = local / str(entry.get("path"))
        if target.is_symlink() or not target.is_file() or root not in target.resolve().parents:
            continue
        target.chmod(target.stat().st_mode | 0o111)
        changed += 1
    return changed


def upload_folder(local: Path, remote: str) -> int:
    """Copy every file under ``local`` to the same relative names under ``remote``,
    overwriting; the number of files copied (0 for a missing or empty folder).

    Links are skipped, and a folder that is a link is not read: the folder
    is the trainer's (another account), the agent reading it is root, and a
    link would have it upload what the trainer may not read. (rglob does not
    enter linked folders.)
    """
    if local.is_symlink() or not local.is_dir():
        return 0
    files = [path for path in local.rglob("*") if path.is_file() and not path.is_symlink()]
    if not files:
        return 0
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(remote)
    root = root.rstrip("/")
    targets = [f"{root}/{path.relative_to(local).as_posix()}" for path in files]
    for parent in sorted({target.rsplit("/", 1)[0] for target in targets}):
        fs.makedirs(parent, exist_ok=True)  # a no-op on GCS; real folders on a disk
    # File by file, named: the same names the first time and every time after.
    fs.put([str(path) for path in files], targets)
    return len(files)


def download_folder(remote: str, local: Path) -> int:
    """Copy every object under ``remote`` into ``local`` at the same relative names;
    the number of files copied.

    Raises:
        FileNotFoundError: nothing is stored under ``remote``.
    """
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(remote)
    root = root.rstrip("/")
    # Listings are cached per filesystem; this may run long after another
    # process wrote the folder.
    fs.invalidate_cache(root)
    found = [path for path in fs.find(root) if not path.endswith("/")]
    if not found:
        raise FileNotFoundError(f"nothing stored under {remote}")
    local.mkdir(parents=True, exist_ok=True)
    fs.get(f"{root}/", f"{local}/", recursive=True)
    return len(found)
