"""The Spot preemption notice as a training script sees it: SIGTERM, a flag, an exit code.

On the notice (about 30 s before the VM goes) the agent sends the trainer
SIGTERM and gives it most of the notice. A trainer that saves its state at
its next step and exits with :data:`EXIT_STOPPED` resumes from that step on
the next VM; the agent uploads what the checkpoint folder holds after it
exits. The framework integrations (``spotline.transformers``,
``spotline.lightning``) use this module; a plain loop can too::

    flag = NoticeFlag().install()
    for step in ...:
        train_one_step()
        if flag.requested:
            save()
            sys.exit(EXIT_STOPPED)
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from spotline.shared.contract.ranks import EXIT_STOPPED

__all__ = ["EXIT_STOPPED", "NoticeFlag", "step_time_s", "stored_uri"]

# Each local folder the agent mirrors, and the variable holding its storage URL.
_MIRRORED = (
    ("SPOTLINE_CHECKPOINT_DIR", "SPOTLINE_CHECKPOINT_URL"),
    ("SPOTLINE_OUTPUT_DIR", "SPOTLINE_OUTPUT_URL"),
)


class NoticeFlag:
    """Turns SIGTERM into a flag that a training loop polls at step ends.

    The handler only sets :attr:`requested`: the signal may land in the middle
    of a tensor op or a file write, so the save waits for the step's end. A
    handler installed before this one (a framework's, a logger's) is called
    after the flag is set, so it still sees the signal; the default action
    (ending the process) is not taken.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def install(self) -> NoticeFlag:
        """Install the handler (main thread only); a no-op when already installed."""
        if not self._installed:
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True
        return self

    def uninstall(self) -> None:
        """Put back the handler that :meth:`install` replaced."""
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def __enter__(self) -> NoticeFlag:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if callable(self._previous):
            self._previous(signum, frame)


def stored_uri(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> str:
    """Where ``path`` lands in storage: a path under ``SPOTLINE_CHECKPOINT_DIR``
    (or ``SPOTLINE_OUTPUT_DIR``), the local folders the agent mirrors, as a URL
    under ``SPOTLINE_CHECKPOINT_URL`` (or ``SPOTLINE_OUTPUT_URL``); any other
    path as it is. Epoch reports name the stored copy (the local one goes with
    the VM); a checkpoint report names the local path, which the agent maps
    itself, reporting the state saved only once its upload is done."""
    env = os.environ if env is None else env
    resolved = Path(path).resolve()
    for folder_var, url_var in _MIRRORED:
        folder, url = env.get(folder_var), env.get(url_var)
        if not folder or not url:
            continue
        root = Path(folder).resolve()
        if resolved == root or root in resolved.parents:
            relative = resolved.relative_to(root).as_posix()
            return url.rstrip("/") + ("" if relative == "." else f"/{relative}")
    return str(path)


def step_time_s(env: Mapping[str, str] | None = None) -> float:
    """Seconds to sleep after every step, simulated compute for a demo (so that
    ``spotline preempt`` lands mid-run): ``step_time_s`` in
    ``SPOTLINE_HYPERPARAMETERS``, as the built-in trainers read it; 0 without.

    Raises:
        ValueError: it is not a number of seconds >= 0.
    """
    env = os.environ if env is None else env
    try:
        hyper = json.loads(env.get("SPOTLINE_HYPERPARAMETERS") or "{}")
        value = float(hyper.get("step_time_s", 0.0) if isinstance(hyper, dict) else 0.0)
    except (TypeError, ValueError) as error:
        raise ValueError(f"SPOTLINE_HYPERPARAMETERS step_time_s: {error}") from None
    if not value >= 0:
        raise ValueError(f"step_time_s must be a number of seconds >= 0, not {value!r}")
    return value
