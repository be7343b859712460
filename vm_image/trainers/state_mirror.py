"""A training-state folder written on the VM's disk and mirrored to storage.

Keras' ``BackupAndRestore`` and ``TensorBoard`` write through TensorFlow's own
file API, not fsspec: a ``gs://`` folder would need TensorFlow's GCS client,
which knows neither gcsfs's credentials nor the local stack's storage emulator
(it resolves www.googleapis.com). So the state is written to a local folder,
copied to the job's checkpoint folder (any fsspec URL) after every save, and
copied back before training starts. A local folder (a path or ``file://``
URL) is used as it is.

No TensorFlow here: the module is tested, and imported, without it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

from fsspec.core import url_to_fs


def local_path(uri: str) -> str | None:
    """``uri`` as a plain local path; None for a remote URL (``gs://`` and the like)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return url2pathname(unquote(parsed.path))
    return uri if parsed.scheme == "" else None


class MirroredFolder:
    """The local folder a trainer writes to, and the storage URL it mirrors.

    Args:
        uri: the folder in storage: a ``gs://`` (any fsspec) URL, a ``file://``
            URL or a path.
        staging: where the local copy lives for a remote ``uri``; default a
            new temporary folder.
    """

    def __init__(self, uri: str, staging: Path | None = None) -> None:
        self.uri = uri.rstrip("/")
        found = local_path(self.uri)
        self.remote = found is None
        if found is not None:
            self.local = Path(found)
        else:
            self.local = staging or Path(tempfile.mkdtemp(prefix="spotline-state-"))

    def pull(self, names: Sequence[str]) -> list[str]:
        """Copy the named files that storage holds into the local folder; the
        names copied (none for a local folder, which is storage itself)."""
        if not self.remote:
            return []
        fs, root = url_to_fs(self.uri)
        fs.invalidate_cache(root)  # another attempt wrote it, maybe from this process
        self.local.mkdir(parents=True, exist_ok=True)
        copied = []
        for name in names:
            if fs.exists(f"{root}/{name}"):
                fs.get(f"{root}/{name}", str(self.local / name))
                copied.append(name)
        return copied

    def push(self, names: Sequence[str]) -> list[str]:
        """Copy the named local files up, in the order given (each object write
        is atomic: put the file that marks a state complete last); the names
        copied."""
        if not self.remote:
            return []
        fs, root = url_to_fs(self.uri)
        copied = []
        for name in names:
            path = self.local / name
            if path.is_file():
                fs.put(str(path), f"{root}/{name}")
                copied.append(name)
        return copied

    def remove(self, names: Sequence[str]) -> list[str]:
        """Delete the named files from storage (a local folder is storage
        itself: the caller deletes them there); the names deleted."""
        if not self.remote:
            return []
        fs, root = url_to_fs(self.uri)
        fs.invalidate_cache(root)
        removed = []
        for name in names:
            if fs.exists(f"{root}/{name}"):
                fs.rm(f"{root}/{name}")
                removed.append(name)
        return removed
