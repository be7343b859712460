"""The units of a trainer's local folder, as the agent's mirror stores them.

A unit is what one save writes: a file directly in the folder (Lightning's
``epoch=0-step=50.ckpt``, Keras' ``ModelCheckpoint`` file, a ``torch.save``
file) is a unit alone; a subfolder's files together are one unit (Hugging
Face's ``checkpoint-500/``). The mirror stores a unit whole or not at all.

The folder belongs to the trainer (another account); the agent reading it is
root. So links are not followed out of the folder, a linked subfolder is not
entered, and a file is read only where the trainer could read it itself
(``transfers.upload_folder`` reasons the same way). A link to a file in the
same folder (Lightning's ``last.ckpt`` may be one) is read as that file.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from spotline.vm_image.agent.privileges import TrainerAccount

_HF_CHECKPOINT = re.compile(r"checkpoint-\d+")


class Refused(OSError):
    """A file the agent will not read for the trainer; the message says why."""


@dataclass(frozen=True)
class UnitFile:
    """One file of a unit: its name under the folder (``/``-separated) and
    the path the agent reads it at (a link's target, checked to be inside)."""

    name: str
    path: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Unit:
    """A unit as last scanned; ``signature`` changes when any file does."""

    name: str
    files: tuple[UnitFile, ...]

    @property
    def signature(self) -> tuple[tuple[str, int, int], ...]:
        return tuple((f.name, f.size, f.mtime_ns) for f in self.files)

    @property
    def newest_ns(self) -> int:
        return max(f.mtime_ns for f in self.files)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def unfinished(unit: Unit) -> bool:
    """Whether the framework's own files say ``unit`` is not complete, however
    long it has been unchanged. The Hugging Face Trainer writes a checkpoint
    into ``tmp-checkpoint-N/`` and renames it when done, and writes
    ``trainer_state.json`` after the weights, optimizer and RNG state: a
    ``checkpoint-N/`` without it is a save cut short, which its
    ``resume_from_checkpoint`` would pick as the newest and fail on."""
    if unit.name.startswith("tmp-checkpoint-"):
        return True
    if _HF_CHECKPOINT.fullmatch(unit.name):
        return f"{unit.name}/trainer_state.json" not in {f.name for f in unit.files}
    return False


def scan(folder: Path, refuse: Callable[[str, str], None]) -> dict[str, Unit]:
    """The units in ``folder`` by name; what is left out (a link out of the
    folder, a linked subfolder) is named to ``refuse(name, why)``. Empty
    subfolders, sockets and the like make no unit."""
    try:
        root = os.path.realpath(folder)
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except FileNotFoundError:
        return {}
    units: dict[str, Unit] = {}
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            files = _folder_files(root, entry.path, entry.name, refuse)
        else:
            one = _file(root, entry.path, entry.name, refuse)
            files = [one] if one else []
        if files:
            units[entry.name] = Unit(entry.name, tuple(sorted(files, key=lambda f: f.name)))
    return units


def _folder_files(
    root: str, path: str, name: str, refuse: Callable[[str, str], None]
) -> list[UnitFile]:
    files: list[UnitFile] = []
    for current, dirs, names in os.walk(path, followlinks=False):
        relative = os.path.relpath(current, root).replace(os.sep, "/")
        for sub in dirs:
            if os.path.islink(os.path.join(current, sub)):  # os.walk does not enter it
                refuse(f"{relative}/{sub}", "a link to a folder")
        for file_name in names:
            one = _file(root, os.path.join(current, file_name), f"{relative}/{file_name}", refuse)
            if one:
                files.append(one)
    return files


def _file(root: str, path: str, name: str, refuse: Callable[[str, str], None]) -> UnitFile | None:
    try:
        if os.path.islink(path):
            target = os.path.realpath(path)
            if os.path.commonpath([root, target]) != root or target == root:
                refuse(name, "a link that leaves the folder")
                return None
            path = target
        found = os.stat(path, follow_symlinks=False)
    except (FileNotFoundError, ValueError):
        return None  # removed meanwhile (the next scan sees it gone)
    if not stat.S_ISREG(found.st_mode):
        return None
    return UnitFile(name, path, found.st_size, found.st_mtime_ns)


def open_as_reader(file: UnitFile, reader: TrainerAccount | None) -> BinaryIO:
    """``file`` opened for reading, never through a link, and only where
    ``reader`` (the trainer's account; None: the agent's own) may read it.

    Raises:
        Refused: not a plain file, or one the trainer could not read.
        FileNotFoundError: removed meanwhile.
    """
    fd = os.open(file.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise Refused(f"{file.name} is not a plain file")
        if reader is not None and reader.dedicated and not _readable(found, reader):
            raise Refused(f"{file.name}: the trainer's account cannot read it")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _readable(found: os.stat_result, reader: TrainerAccount) -> bool:
    if found.st_uid == reader.uid:
        return bool(found.st_mode & stat.S_IRUSR)
    if found.st_gid == reader.gid or found.st_gid in reader.groups:
        return bool(found.st_mode & stat.S_IRGRP)
    return bool(found.st_mode & stat.S_IROTH)
