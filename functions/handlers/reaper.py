"""spotline-reaper-tick -> reaper: the sweep Cloud Scheduler starts every
minute. It lists, publishes stages 1, 2 and 4 in pages on
``spotline-reaper-page`` (``reaper_page`` sweeps each), and runs stages 3 and 5
itself (``spotline.functions.ops.sweep``)."""

from __future__ import annotations

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message, pubsub_handler
from spotline.functions.ops.sweep import tick
from spotline.shared import logs


@pubsub_handler
def reaper(message: Message, deps: Deps) -> None:
    counts = tick(deps, deps.clock())
    logs.info(f"reaper: {dict(counts) or 'nothing to do'}", **counts)
