"""spotline-reaper-tick -> reaper: the sweep Cloud Scheduler starts every
minute (``functions.ops.sweep``: load -> decide -> apply, in five stages)."""

from __future__ import annotations

from functions.deps import Deps
from functions.handlers.envelope import Message, pubsub_handler
from functions.ops.sweep import sweep
from shared import logs


@pubsub_handler
def reaper(message: Message, deps: Deps) -> None:
    counts = sweep(deps, deps.clock())
    logs.info(f"reaper: {dict(counts) or 'nothing to do'}", **counts)
