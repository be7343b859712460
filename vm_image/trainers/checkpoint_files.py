"""Checkpoint file names and listings, without torch.

Kept apart from ``torch_checkpoint`` so that the shutdown script, which has
seconds to report a preemption, does not pay torch's import (about 1.7 s).
Files are ``ckpt-<global step, 12 digits>.pt``, so names sort by step;
temporary files start with ``.tmp-`` and never match.
"""

from __future__ import annotations

import re

import fsspec
from fsspec.core import url_to_fs

CHECKPOINT_PATTERN = re.compile(r"^ckpt-(\d{12})\.pt$")


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint taken after ``step`` optimizer steps."""
    if not 0 <= step < 10**12:
        raise ValueError(f"step {step} does not fit a checkpoint name")
    return f"ckpt-{step:012d}.pt"


def step_of(uri: str) -> int | None:
    """The step in a checkpoint's name, or None for another file."""
    match = CHECKPOINT_PATTERN.match(uri.rstrip("/").rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def checkpoint_paths(fs: fsspec.AbstractFileSystem, root: str) -> list[tuple[int, str]]:
    """(step, path) of each complete checkpoint under ``root``, by step."""
    # gcsfs caches listings; another attempt or process may have written since.
    fs.invalidate_cache(root)
    try:
        paths = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    found = []
    for path in paths:
        step = step_of(str(path))
        if step is not None:
            found.append((step, str(path)))
    return sorted(found)


def list_checkpoints(checkpoint_dir: str) -> list[str]:
    """URLs of the complete checkpoints in ``checkpoint_dir``, oldest step first."""
    fs, root = url_to_fs(checkpoint_dir)
    return [str(fs.unstrip_protocol(path)) for _, path in checkpoint_paths(fs, root)]


def latest_checkpoint(checkpoint_dir: str) -> str | None:
    """The URL of the checkpoint with the highest step, or None when there is none."""
    checkpoints = list_checkpoints(checkpoint_dir)
    return checkpoints[-1] if checkpoints else None
