"""The functions' source archive: what Cloud Functions builds each function from.

The Python runtime wants ``main.py`` at the root of the archive with a
``requirements.txt`` beside it: the root ``main.py`` is a copy of
``spotline.functions.main``. The functions import ``spotline.functions`` and
``spotline.shared`` (with its machine catalog), laid out under ``spotline/`` as
they install. Nothing else goes in: no tests, no ``spotline.infra``, no VM
image, no virtual environment or caches.

Everything is read from the installed package, not from a clone: a wheel
deploys as an editable install does. The archive is byte-for-byte reproducible
(sorted entries, fixed timestamps and modes), the same from either, so its
digest says whether a deployed function runs this source.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

DISTRIBUTION = "spotline"
# The subpackages the functions import, each under ``spotline/`` in the archive.
PACKAGES = ("functions", "shared")
ENTRY_POINTS = "main.py"  # in spotline.functions; Cloud Functions wants it at the root
SUFFIXES = (".py", ".json")
# Runtime dependencies the functions never import: the deploying CLI's, and
# storage's (only the VMs and the CLI read or write the bucket; the functions
# pass gs:// URLs along as strings).
DEPLOY_ONLY = frozenset(
    {
        "google-cloud-functions",
        "google-cloud-scheduler",
        "google-cloud-service-usage",
        "google-cloud-resource-manager",
        "google-cloud-storage",
        "google-cloud-logging",
        "rich",  # the CLI's tables
        "argcomplete",  # the CLI's shell completion
    }
)
STORAGE_ONLY = frozenset({"fsspec", "gcsfs"})
NOT_IN_FUNCTIONS = DEPLOY_ONLY | STORAGE_ONLY
# Zip timestamps cannot be older than 1980.
_EPOCH = (1980, 1, 1, 0, 0, 0)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class SourceArchive:
    data: bytes
    files: tuple[str, ...]  # archive paths, sorted
    requirements: str

    @property
    def digest(self) -> str:
        """A label-safe hash of the archive (labels take at most 63 characters)."""
        return hashlib.sha256(self.data).hexdigest()[:32]


def requirements(pin: bool = True) -> str:
    """``requirements.txt`` from spotline's installed runtime dependencies
    (its metadata, as pyproject.toml declares them; no extra's).

    With ``pin``, each dependency installed here is pinned to the installed
    version: the functions then run the libraries the tests ran with, and
    Cloud Functions' pip (which takes the newest allowed version) cannot
    surprise them. One not installed keeps the declared specifier.
    """
    lines = []
    for declared in metadata.requires(DISTRIBUTION) or []:
        spec, _, marker = (part.strip() for part in declared.partition(";"))
        if "extra" in marker:
            continue
        match = _NAME.match(spec)
        if match is None:
            raise ValueError(f"cannot read the dependency {declared!r} of {DISTRIBUTION}")
        name = match.group(0)
        if name.lower() in NOT_IN_FUNCTIONS:
            continue
        line = _pinned(name, spec) if pin else spec
        lines.append(f"{line}; {marker}" if marker else line)
    return "\n".join(sorted(lines, key=str.lower)) + "\n"


def _pinned(name: str, spec: str) -> str:
    try:
        return f"{name}=={metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return spec


def package_dir(name: str = "") -> Path:
    """Where ``spotline`` (or ``spotline.NAME``) is installed: site-packages for
    a wheel, the clone's folder for an editable install."""
    return Path(str(resources.files(f"{DISTRIBUTION}.{name}" if name else DISTRIBUTION)))


def source_files() -> list[tuple[str, Path]]:
    """(archive path, file) of everything the functions import, sorted."""
    found = [
        (ENTRY_POINTS, package_dir("functions") / ENTRY_POINTS),
        ("spotline/__init__.py", package_dir() / "__init__.py"),
    ]
    for package in PACKAGES:
        folder = package_dir(package)
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                found.append((f"spotline/{package}/{path.relative_to(folder).as_posix()}", path))
    return sorted(found)


def build_archive(pin: bool = True) -> SourceArchive:
    """The zip Cloud Functions builds every spotline function from."""
    reqs = requirements(pin)
    entries = [(name, path.read_bytes()) for name, path in source_files()]
    entries.append(("requirements.txt", reqs.encode()))
    entries.sort()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
    return SourceArchive(buffer.getvalue(), tuple(name for name, _ in entries), reqs)
