"""A trainer's local folder mirrored to storage: its checkpoints (restored
before the trainer starts) and its outputs (uploaded only).

Frameworks write checkpoints to a local folder (the Hugging Face Trainer's
``output_dir``, Lightning's ``dirpath``, Keras' ``ModelCheckpoint``,
``torch.save``), and a VM's disk dies with the VM. So the trainer gets a
local folder (``SPOTLINE_CHECKPOINT_DIR``) that the agent

1. restores from storage before the trainer starts (``restore``);
2. scans every couple of seconds while it runs, uploading each unit
   (``folder_units``) once it is complete: every file unchanged (size and
   modification time) for ``settle_s``; newest first, each once;
3. uploads whatever is left once the trainer exits (``finish``), before the
   agent reports the job finished or preempted, so the next attempt sees it.

Storage has no atomic folder write, so a manifest object (``MANIFEST`` under
the URL) lists the units stored whole; it is written after a unit's last
file, and restore reads only what it lists: a checkpoint folder half
uploaded when the VM died is never restored. A unit the trainer deleted
(``save_total_limit`` and the like) leaves the manifest, then storage, once
a newer unit is stored. Objects the manifest does not list (what a trainer
wrote straight to the URL) are never touched.

Every node of a gang mirrors its own folder to the same URL (frameworks
write checkpoints from rank 0): each manifest write applies only this
node's changes to the manifest as stored.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from spotline.shared import logs
from spotline.vm_image.agent.folder_units import (
    Refused,
    Unit,
    UnitFile,
    open_as_reader,
    scan,
    unfinished,
)
from spotline.vm_image.agent.privileges import TrainerAccount

MANIFEST = ".spotline-mirror.json"
# A unit is complete once none of its files changed for this long.
SETTLE_S = 2.0
SCAN_S = 2.0
_COPY_BYTES = 8 * 1024 * 1024
# gcsfs uploads a large object in pieces of this size (held in memory): its
# default, 5 MiB, made a 50 MB checkpoint's upload twice as slow.
_UPLOAD_BLOCK_BYTES = 64 * 1024 * 1024


@dataclass
class _Stored:
    """A unit the manifest lists, as this mirror knows it: the local
    signature it had when stored (or restored), its files, and its age
    (the newest file's mtime when it was saved) to order deletions."""

    signature: tuple[tuple[str, int, int], ...]
    files: list[str]
    newest_ns: int


@dataclass
class SyncReport:
    stored: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    bytes: int = 0


class FolderMirror:
    """``local`` mirrored to ``url`` (any fsspec URL; ``gs://`` in the cloud).

    Args:
        reader: the trainer's account: a file it could not read is not
            uploaded. None: the agent's own user (the local stack).
        settle_s: how long a unit's files must stay unchanged to be stored.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        local: Path,
        url: str,
        reader: TrainerAccount | None = None,
        settle_s: float = SETTLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from fsspec.core import url_to_fs  # imported on first use: gcsfs is slow to import

        self.local = local
        self.url = url.rstrip("/")
        self.reader = reader
        self.settle_s = settle_s
        self.clock = clock
        self.fs, root = url_to_fs(self.url)
        self.root = root.rstrip("/")
        self.stored: dict[str, _Stored] = {}
        self._seen: dict[str, tuple[tuple[tuple[str, int, int], ...], float]] = {}
        self._refused: set[str] = set()
        self._made: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def unit_of(self, path: str) -> tuple[str, tuple[tuple[str, int, int], ...]] | None:
        """The unit that holds ``path`` (in the local folder) as it is now: its
        name and signature, for ``holds``; None for a path elsewhere or gone."""
        try:
            relative = Path(path).resolve().relative_to(self.local.resolve())
        except (OSError, ValueError):
            return None
        if not relative.parts:
            return None
        unit = scan(self.local, lambda *_: None).get(relative.parts[0])
        return None if unit is None else (unit.name, unit.signature)

    def holds(self, name: str, signature: tuple[tuple[str, int, int], ...]) -> bool:
        """Whether unit ``name`` is stored as it was when ``unit_of`` saw it."""
        stored = self.stored.get(name)
        return stored is not None and stored.signature == signature

    # -- restore ----------------------------------------------------------

    def restore(self) -> int:
        """Download every unit the manifest lists into the local folder; how
        many. A unit whose objects are gone is skipped with a warning."""
        self.local.mkdir(parents=True, exist_ok=True)
        restored: dict[str, tuple[list[str], int]] = {}
        for name, entry in self._read_manifest().items():
            files = _entry_files(name, entry)
            if files is None:
                logs.warning(f"{self.url}/{MANIFEST}: unit {name!r} is malformed; not restored")
                continue
            try:
                for file_name in files:
                    target = self.local / file_name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    self.fs.get_file(f"{self.root}/{file_name}", str(target))
            except FileNotFoundError as err:
                logs.warning(f"{self.url}: unit {name!r} is incomplete ({err}); not restored")
                shutil.rmtree(self.local / name, ignore_errors=True)
                (self.local / name).unlink(missing_ok=True)
                continue
            restored[name] = (files, int(entry.get("newest_ns", 0)))
        units = scan(self.local, lambda *_: None)
        for name, (files, newest_ns) in restored.items():
            if name in units:
                self.stored[name] = _Stored(units[name].signature, files, newest_ns)
        return len(self.stored)

    # -- sync -------------------------------------------------------------

    def sync(self, final: bool = False) -> SyncReport:
        """Store the units that are complete (all of them when ``final``: the
        trainer has exited), newest first; then forget the units the trainer
        deleted, once nothing newer waits."""
        with self._lock:
            return self._sync(final)

    def _sync(self, final: bool) -> SyncReport:
        report = SyncReport()
        now = self.clock()
        units = scan(self.local, self._refuse)
        if units.pop(MANIFEST, None) is not None:
            self._refuse(MANIFEST, "the mirror's own name in storage")
        ready: list[Unit] = []
        for name, unit in units.items():
            stored = self.stored.get(name)
            if stored is not None and stored.signature == unit.signature:
                continue
            if unfinished(unit):
                report.pending.append(name)
                continue
            seen = self._seen.get(name)
            if seen is None or seen[0] != unit.signature:
                self._seen[name] = (unit.signature, now)
                seen = self._seen[name]
            if final or now - seen[1] >= self.settle_s:
                ready.append(unit)
            else:
                report.pending.append(name)
        for unit in sorted(ready, key=lambda u: u.newest_ns, reverse=True):
            if self._store(unit):
                report.stored.append(unit.name)
                report.bytes += unit.size
            else:
                report.pending.append(unit.name)
        self._seen = {name: seen for name, seen in self._seen.items() if name in units}
        report.deleted = self._forget_deleted(units, not report.pending)
        return report

    def _store(self, unit: Unit) -> bool:
        """Upload ``unit`` and list it in the manifest; whether it was stored
        whole (a file removed or changed meanwhile: not, the next scan tries)."""
        earlier = self.stored.pop(unit.name, None)
        if earlier is not None:
            # Rewritten in place: unlisted while its objects are replaced.
            self._commit(remove={unit.name})
        try:
            for file in unit.files:
                self._put(file)
        except Refused as err:
            self._refuse(unit.name, str(err))
            return False
        except FileNotFoundError:
            return False
        except OSError as err:  # a link turned into something else meanwhile
            self._refuse(unit.name, f"{err}")
            return False
        now = scan(self.local, lambda *_: None).get(unit.name)
        if now is None or now.signature != unit.signature:
            return False
        names = [f.name for f in unit.files]
        entry = {"files": names, "bytes": unit.size, "newest_ns": unit.newest_ns}
        self._commit(add={unit.name: entry})
        self.stored[unit.name] = _Stored(unit.signature, names, unit.newest_ns)
        if earlier is not None:
            self._remove_objects(set(earlier.files) - set(names))
        return True

    def _put(self, file: UnitFile) -> None:
        target_name = f"{self.root}/{file.name}"
        with open_as_reader(file, self.reader) as source:
            parent = target_name.rsplit("/", 1)[0]
            if parent not in self._made:
                self.fs.makedirs(parent, exist_ok=True)  # a no-op on GCS; real folders on a disk
                self._made.add(parent)
            with self.fs.open(target_name, "wb", block_size=_UPLOAD_BLOCK_BYTES) as target:
                shutil.copyfileobj(source, target, _COPY_BYTES)

    def _forget_deleted(self, units: dict[str, Unit], nothing_waits: bool) -> list[str]:
        """Drop the stored units that are gone locally, from the manifest
        first, then their objects: each once a newer unit is stored, or
        nothing waits to be."""
        newest = max((s.newest_ns for n, s in self.stored.items() if n in units), default=None)
        gone = [
            name
            for name, stored in self.stored.items()
            if name not in units
            and (nothing_waits or (newest is not None and newest > stored.newest_ns))
        ]
        if not gone:
            return []
        self._commit(remove=set(gone))
        for name in gone:
            self._remove_objects(set(self.stored.pop(name).files))
        return gone

    def _remove_objects(self, names: set[str]) -> None:
        for name in sorted(names):
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(f"{self.root}/{name}")

    # -- the manifest -----------------------------------------------------

    def _read_manifest(self) -> dict[str, dict[str, Any]]:
        path = f"{self.root}/{MANIFEST}"
        try:
            raw = self.fs.cat_file(path)
        except FileNotFoundError:
            return {}
        try:
            units = json.loads(raw)["units"]
            if not isinstance(units, dict):
                raise TypeError("units is not an object")
        except (ValueError, KeyError, TypeError) as err:
            logs.warning(f"{self.url}/{MANIFEST} is not a mirror's manifest ({err}); ignored")
            return {}
        return {str(k): v for k, v in units.items() if isinstance(v, dict)}

    def _commit(
        self, add: dict[str, dict[str, Any]] | None = None, remove: set[str] | None = None
    ) -> None:
        """Apply this mirror's changes to the manifest as stored (another node
        of the gang may have written it since) and write it in one object."""
        units = self._read_manifest()
        for name in remove or ():
            units.pop(name, None)
        units.update(add or {})
        data = json.dumps({"version": 1, "units": units}, sort_keys=True).encode()
        if self.root not in self._made:
            self.fs.makedirs(self.root, exist_ok=True)
            self._made.add(self.root)
        self.fs.pipe_file(f"{self.root}/{MANIFEST}", data)

    def _refuse(self, name: str, why: str) -> None:
        if name not in self._refused:
            self._refused.add(name)
            logs.warning(f"{self.local}/{name} is not uploaded to {self.url}: {why}")

    # -- while the trainer runs ---------------------------------------------

    def start(self, interval_s: float = SCAN_S) -> None:
        """Sync every ``interval_s`` in a thread until ``finish``."""

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    done = self.sync()
                except Exception as err:  # storage out of reach: the next scan tries again
                    logs.warning(f"mirroring {self.local} to {self.url} failed: {err!r}")
                    continue
                if done.stored or done.deleted:
                    logs.info(
                        f"mirrored {self.local} to {self.url}: stored {done.stored}, "
                        f"deleted {done.deleted}"
                    )

        self._thread = threading.Thread(target=loop, name=f"mirror {self.local}", daemon=True)
        self._thread.start()

    def finish(self, timeout_s: float) -> SyncReport | None:
        """Stop scanning and store everything not yet stored, within
        ``timeout_s``; what was done, or None when it ran out of time (it
        goes on in the background) or failed (the reason is logged)."""
        self._stop.set()
        answer: list[SyncReport] = []

        def final() -> None:
            try:
                answer.append(self.sync(final=True))
            except Exception as err:
                logs.error(f"the last upload of {self.local} to {self.url} failed: {err!r}")

        worker = threading.Thread(target=final, name=f"final sync {self.local}", daemon=True)
        worker.start()
        worker.join(max(timeout_s, 0.0))
        if worker.is_alive():
            logs.error(f"the last upload of {self.local} to {self.url} took over {timeout_s:.0f} s")
            return None
        return answer[0] if answer else None


def _entry_files(name: str, entry: dict[str, Any]) -> list[str] | None:
    """The unit's file names, each checked to stay inside the unit: the
    manifest is read from storage the trainer may write, and the agent
    restoring it is root."""
    files = entry.get("files")
    if not isinstance(files, list) or not files:
        return None
    if PurePosixPath(name).parts != (name,) or name in ("", ".", ".."):
        return None
    checked = []
    for file_name in files:
        if not isinstance(file_name, str):
            return None
        parts = PurePosixPath(file_name).parts
        if not parts or parts[0] != name or any(p in ("", ".", "..", "/") for p in parts):
            return None
        if "\\" in file_name or "\0" in file_name:
            return None
        checked.append(file_name)
    return checked
