"""Whether a job's ``code_uri`` and ``data_uri`` hold anything, asked before
it is published: a location with nothing stored cannot become a job on any
VM. Only a definite answer refuses: a location this machine may not read (the
VMs' account may) is left to the VM, which names it if it cannot either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotline.shared.domain.spec import JobSpec

FIELDS = ("code_uri", "data_uri")


def location_problems(spec: JobSpec, *, local: bool, uploaded: frozenset[str]) -> list[str]:
    """Why the spec's locations cannot be read by its VMs, one line each.

    Args:
        spec: the checked spec.
        local: the VMs are this machine's processes (the local stack).
        uploaded: the fields set to folders uploaded with the submission
            (``code_dir``, ``data_dir``), which are not there yet.
    """
    problems = []
    for field in FIELDS:
        uri = getattr(spec, field)
        if uri is None or field in uploaded:
            continue
        problem = _problem(field, uri, local)
        if problem is not None:
            problems.append(problem)
    return problems


def _problem(field: str, uri: str, local: bool) -> str | None:
    from fsspec.core import url_to_fs
    from fsspec.implementations.local import LocalFileSystem

    upload = "--code-dir" if field == "code_uri" else "--data-dir"
    fs, path = url_to_fs(uri)
    if isinstance(fs, LocalFileSystem) and not local:
        return (
            f"{field}: {uri} is a path on this machine, which a VM in the cloud cannot "
            f"read; upload it with `spotline submit {upload}`"
        )
    try:
        fs.invalidate_cache(path)
        found = fs.exists(path)
    except (PermissionError, OSError, ValueError):
        return None  # not for this machine to say: the VM's account may read it
    if found:
        return None
    return (
        f"{field}: nothing is stored at {uri}; upload the folder with "
        f"`spotline submit {upload}`, or fix the URL"
    )
