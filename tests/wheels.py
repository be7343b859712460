"""spotline's wheel, built as a packager builds it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def build_wheel(repo_root: Path, out: Path) -> Path:
    """The wheel of the working tree's files (tracked, and new ones not ignored),
    built from a copy: the clone's own build/ may hold files deleted since."""
    source = out / "source"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo_root,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (entry.decode() for entry in listed)):
        path = repo_root / name
        if not path.exists() and not path.is_symlink():
            continue  # deleted in the working tree, not yet in the index
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():  # spotline/'s links to the folders
            target.symlink_to(os.readlink(path))
        else:
            target.write_bytes(path.read_bytes())
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("spotline-*.whl")
    return wheel
