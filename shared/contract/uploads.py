"""The layout of a folder uploaded for a job (``spotline submit --code-dir``),
shared by the client that writes it (infra/client/uploads.py) and the agent
that reads it (agent.py ``_fetch_code``)::

    {storage_root}/code/{sha256}/files/...     the folder's files: the job's code_uri
    {storage_root}/code/{sha256}/manifest.json every file's path, mode, size, sha256

Storage keeps no file modes: the manifest does, so a script the folder holds
as executable (``./run.sh``) is executable on the VM too.
"""

from __future__ import annotations

PREFIXES = {"code_uri": "code", "data_uri": "data"}
FILES = "files"
MANIFEST = "manifest.json"
EXECUTABLE = "100755"


def manifest_uri(uri: str) -> str | None:
    """The manifest beside an uploaded folder's files; None when ``uri`` is
    not laid out so (a folder uploaded some other way)."""
    base = uri.rstrip("/")
    if not base.endswith(f"/{FILES}"):
        return None
    return f"{base.removesuffix(FILES)}{MANIFEST}"
