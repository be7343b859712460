"""spotline-reaper-page -> reaper_page: one page of a reaper tick
(``spotline.functions.ops.sweep_pages``), decided as of the tick, applied now."""

from __future__ import annotations

from spotline.functions.deps import Deps
from spotline.functions.handlers.envelope import Message, pubsub_handler
from spotline.functions.ops.sweep_pages import SweepPage, run_page
from spotline.shared import logs


@pubsub_handler
def reaper_page(message: Message, deps: Deps) -> None:
    page = message.parse(SweepPage)
    now = deps.clock()
    late_s = (now - page.listed_at).total_seconds()
    if late_s > deps.settings.reaper_page_max_age_s:
        # Its listing is too old to act on; the next tick lists afresh.
        logs.warning(f"reaper: a {page.kind} page {late_s:.0f} s late, dropped")
        return
    counts = run_page(deps, page, now)
    logs.info(f"reaper: {page.kind} page: {dict(counts) or 'nothing to do'}", **counts)
