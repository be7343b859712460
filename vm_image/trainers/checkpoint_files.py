"""Checkpoint file names and listings, without torch or TensorFlow.

Kept apart from ``spotline.torch`` and ``spotline.keras`` so that the
shutdown script, which has seconds to report a preemption, does not pay
torch's import (about 1.7 s) or TensorFlow's.
PyTorch files are ``ckpt-<global step, 12 digits>.pt``, so names sort by step;
temporary files start with ``.tmp-`` and never match. The Keras callbacks keep
one state, ``latest.weights.h5``, overwritten at every save.
"""

from __future__ import annotations

import re

import fsspec
from fsspec.core import url_to_fs

CHECKPOINT_PATTERN = re.compile(r"^ckpt-(\d{12})\.pt$")
# The name Keras' BackupAndRestore gives the weights and optimizer state; its
# epoch goes in training_metadata.json beside it, the step in neither name.
KERAS_STATE_FILE = "latest.weights.h5"


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint taken after ``step`` optimizer steps."""
    if not 0 <= step < 10**12:
        raise ValueError(f"step {step} does not fit a checkpoint name")
    return f"ckpt-{step:012d}.pt"


def step_of(uri: str) -> int | None:
    """The step in a checkpoint's name, or None for another file."""
    match = CHECKPOINT_PATTERN.match(uri.rstrip("/").rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def _listing(fs: fsspec.AbstractFileSystem, root: str) -> list[str]:
    # gcsfs caches listings; another attempt or process may have written since.
    fs.invalidate_cache(root)
    try:
        return [str(path) for path in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return []


def checkpoint_paths(fs: fsspec.AbstractFileSystem, root: str) -> list[tuple[int, str]]:
    """(step, path) of each complete PyTorch checkpoint under ``root``, by step."""
    return _by_step(_listing(fs, root))


def _by_step(paths: list[str]) -> list[tuple[int, str]]:
    return sorted((step, path) for path in paths if (step := step_of(path)) is not None)


def list_checkpoints(checkpoint_dir: str) -> list[str]:
    """URLs of the complete checkpoints in ``checkpoint_dir``, oldest step first."""
    fs, root = url_to_fs(checkpoint_dir)
    return [str(fs.unstrip_protocol(path)) for _, path in checkpoint_paths(fs, root)]


def latest_checkpoint(checkpoint_dir: str) -> str | None:
    """The URL of the checkpoint with the highest step, or None when there is none."""
    checkpoints = list_checkpoints(checkpoint_dir)
    return checkpoints[-1] if checkpoints else None


def latest_saved_state(checkpoint_dir: str) -> str | None:
    """The URL of the newest state either built-in's helpers saved in
    ``checkpoint_dir``: the highest-step PyTorch checkpoint, else the Keras
    state (``step_of`` gives None for it); None when there is neither."""
    fs, root = url_to_fs(checkpoint_dir)
    paths = _listing(fs, root)
    steps = _by_step(paths)
    if steps:
        return str(fs.unstrip_protocol(steps[-1][1]))
    for path in paths:
        if path.rstrip("/").rsplit("/", 1)[-1] == KERAS_STATE_FILE:
            return str(fs.unstrip_protocol(path))
    return None
