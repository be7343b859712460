"""A local folder as it is shipped (``spotline submit --code-dir``): the files
the folder's ignore rules keep, their total size, and the address of their
content.

Which files: in a git work tree, what git would show (``git ls-files --cached
--others --exclude-standard``: tracked files and untracked ones no
``.gitignore`` excludes); elsewhere, every file that no ``.gitignore`` in the
folder or under it excludes. Either way a ``.spotlineignore`` at the folder's
root (gitignore syntax) leaves out more, and ``.git`` never travels. A link
to a file in the folder ships that file's content under the link's name; a
link to a file outside it is refused (it could be anything: a key, a home
folder's secrets).

The address is the sha256 of the sorted list of (path, mode, content sha256):
the same files give the same address on any machine and in any order; one
changed byte, a renamed file or a file made executable gives another.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spotline.infra.client.errors import InputsError

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

IGNORE_FILE = ".spotlineignore"
# Over this a folder is refused: a checkpoint or a data set left in the code
# folder is the usual cause, and uploading it on every change would be slow.
DEFAULT_LIMIT_MB = 500
_BIGGEST_NAMED = 5
_CHUNK = 1 << 20


@dataclass(frozen=True)
class PackedFile:
    """One file to ship: its path in the folder (``/``-separated), whether it
    is executable, its size and the sha256 of its content."""

    path: str
    executable: bool
    size: int
    sha256: str

    @property
    def mode(self) -> str:
        """As git writes it: 100755 or 100644."""
        return "100755" if self.executable else "100644"


@dataclass(frozen=True)
class Pack:
    """The files of a folder to ship, and the address of their content."""

    folder: Path
    files: tuple[PackedFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def digest(self) -> str:
        """sha256 of the sorted (path, mode, content sha256) list."""
        listing = sorted((f.path, f.mode, f.sha256) for f in self.files)
        return hashlib.sha256(json.dumps(listing).encode()).hexdigest()

    def manifest(self) -> dict[str, object]:
        """What the upload's marker holds: every file, so the upload can be checked."""
        return {
            "digest": self.digest,
            "size": self.size,
            "files": [
                {"path": f.path, "mode": f.mode, "size": f.size, "sha256": f.sha256}
                for f in sorted(self.files, key=lambda f: f.path)
            ],
        }


def pack(folder: str | os.PathLike[str], limit_mb: float = DEFAULT_LIMIT_MB) -> Pack:
    """The files of ``folder`` to ship (see the module's docstring).

    Raises:
        InputsError: the folder does not exist, is not a folder, has a file
            that cannot be read, keeps no file, or holds more than
            ``limit_mb`` (the biggest files named).
    """
    root = Path(folder)
    if not root.exists():
        raise InputsError(f"{folder}: no such folder")
    if not root.is_dir():
        raise InputsError(f"{folder}: not a folder (give the folder that holds the code)")
    in_git = _git_listed(root)
    names = _without_ignored(root, in_git if in_git is not None else _walked(root))
    sizes: list[tuple[str, int, bool]] = []
    inside = root.resolve()
    outside = []
    for name in names:
        try:
            info = (root / name).stat()
        except OSError:
            continue  # tracked but deleted, or a link to nothing: not in the folder
        if not stat.S_ISREG(info.st_mode):
            continue
        if (root / name).is_symlink() and inside not in (root / name).resolve().parents:
            outside.append(f"{name} -> {(root / name).resolve()}")
        sizes.append((name, info.st_size, bool(info.st_mode & stat.S_IXUSR)))
    if outside:  # a link would upload what it points at: never a file from elsewhere unasked
        raise InputsError(
            f"{folder} links to files outside it: {', '.join(outside[:_BIGGEST_NAMED])}; "
            f"copy them in, or leave the links out with a {IGNORE_FILE}"
        )
    if not sizes:
        why = (
            "git ignores every file in it, or the .spotlineignore does "
            f"(`git -C {folder} status --ignored .` shows which)"
            if in_git is not None
            else f"no file, or the .gitignore and {IGNORE_FILE} files leave out every one"
        )
        raise InputsError(f"{folder}: no file to upload: {why}")
    _check_size(folder, sizes, limit_mb)
    files = tuple(
        PackedFile(name, executable, size, _sha256(root / name, folder))
        for name, size, executable in sizes
    )
    return Pack(root, files)


def _check_size(folder: object, sizes: list[tuple[str, int, bool]], limit_mb: float) -> None:
    total = sum(size for _, size, _ in sizes)
    if total <= limit_mb * 1e6:
        return
    biggest = sorted(sizes, key=lambda entry: -entry[1])[:_BIGGEST_NAMED]
    named = ", ".join(f"{name} ({human(size)})" for name, size, _ in biggest)
    raise InputsError(
        f"{folder} holds {human(total)} in {len(sizes)} files, over the {limit_mb:g} MB "
        f"limit; the biggest: {named}. Leave them out with a {IGNORE_FILE} (gitignore "
        "syntax), put data in --data-dir, or raise the limit (--upload-limit-mb)"
    )


def _sha256(path: Path, folder: object) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as read:
            while chunk := read.read(_CHUNK):
                digest.update(chunk)
    except OSError as err:
        raise InputsError(f"{folder}: cannot read {path}: {err.strerror or err}") from None
    return digest.hexdigest()


def _git_listed(root: Path) -> list[str] | None:
    """What git shows under ``root``: tracked files, and untracked ones no
    ``.gitignore`` excludes. None: not in a git work tree (or no git)."""
    command = ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others"]
    try:
        done = subprocess.run(
            [*command, "--exclude-standard"], capture_output=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    names = {name for name in done.stdout.decode("utf-8", "surrogateescape").split("\0") if name}
    return sorted(names)


def _walked(root: Path) -> list[str]:
    """Every file under ``root`` that the ``.gitignore`` files along its path keep."""
    found: list[str] = []
    rules: list[tuple[str, GitIgnoreSpec]] = []  # (folder prefix, its .gitignore)
    for folder, dirs, files in os.walk(root):
        relative = Path(folder).relative_to(root).as_posix()
        prefix = "" if relative == "." else f"{relative}/"
        rules = [(p, spec) for p, spec in rules if prefix.startswith(p)]
        own = _spec_of(Path(folder) / ".gitignore")
        if own is not None:
            rules.append((prefix, own))

        def ignored(name: str, rules: list[tuple[str, GitIgnoreSpec]] = rules) -> bool:
            return any(spec.match_file(name[len(p) :]) for p, spec in rules)

        dirs[:] = sorted(d for d in dirs if d != ".git" and not ignored(f"{prefix}{d}/"))
        found += [f"{prefix}{name}" for name in files if not ignored(f"{prefix}{name}")]
    return sorted(found)


def _without_ignored(root: Path, names: list[str]) -> list[str]:
    spec = _spec_of(root / IGNORE_FILE)
    if spec is None:
        return names
    return [name for name in names if not _matches_or_parent(spec, name)]


def _matches_or_parent(spec: GitIgnoreSpec, name: str) -> bool:
    """Whether ``name`` or a folder above it is ignored (``build/`` leaves out
    ``build/a/b.txt``)."""
    parts = name.split("/")
    folders = ("/".join(parts[:n]) + "/" for n in range(1, len(parts)))
    return any(spec.match_file(folder) for folder in folders) or spec.match_file(name)


def _spec_of(path: Path) -> GitIgnoreSpec | None:
    from pathspec import GitIgnoreSpec

    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    return GitIgnoreSpec.from_lines(lines)


def human(size: float) -> str:
    """``1.5 MB``: sizes in decimal units, as the limit is given."""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"
