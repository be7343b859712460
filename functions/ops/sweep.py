"""The reaper's sweep: what Cloud Scheduler's tick starts every minute
(``spotline.functions.handlers.reaper``).

Level-triggered and idempotent (Scheduler may fire twice): it compares what
Firestore believes with what Compute Engine says exists, and converges. Five
stages, each load -> decide (pure, ``spotline.shared.domain.reaping``) -> apply
(``spotline.functions.ops.sweep_apply``):

1. instances and VMs: a vanished VM is a missed preemption (requeue); a
   silent one is stalled (delete, requeue); one its job no longer owns is
   released; a CLOSING one is finished closing; cooling and stopped periods
   are priced and ended; spotline-labelled VMs nothing owns are deleted;
2. active jobs: cost so far (every ``cost_refresh_s``); past
   ``max_runtime_s`` -> CANCELED; stuck in REQUESTING_SERVER (the placing
   function died) -> placed again;
3. the due queue: placed again, or CANCELED after ``wait_total_s``;
4. users' slots a crash left taken: freed (only the users with a slot the
   tick's listings do not show held are read again: ``users_in_doubt``);
5. state-change events a crash left in a job's outbox: published
   (``spotline.functions.ops.outbox``);
6. gang firewall rules whose attempt is over: deleted
   (``spotline.functions.ops.gang_rules``).

Stages 1, 2 and 4 grow with the project: ``tick`` lists what they need and
publishes it in pages, each swept by its own invocation
(``spotline.functions.ops.sweep_pages``); stages 3, 5 and 6 stay in the tick. ``sweep``
does it all in one process, the pages in turn.

It reads only active documents (and, in stage 5, jobs whose outbox holds
events): terminal jobs and closed instances cost nothing. Every step it
applies is re-entrant, so a sweep killed part-way is finished by the next one.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from spotline.functions.deps import Deps
from spotline.functions.ops.gang_rules import sweep_rules
from spotline.functions.ops.outbox import publish_unpublished
from spotline.functions.ops.sweep_apply import apply
from spotline.functions.ops.sweep_pages import plan, read_jobs, run_page
from spotline.shared import logs
from spotline.shared.domain import reaping as r


def sweep(deps: Deps, now: datetime) -> Counter[str]:
    """Every stage here, the pages in turn; the count of each outcome."""
    pages = plan(deps, now)
    counts: Counter[str] = Counter()
    for page in pages:
        if page.kind != "users":
            counts.update(run_page(deps, page))
    _queue(deps, now, counts)
    for page in pages:
        if page.kind == "users":
            counts.update(run_page(deps, page))
    _outboxes(deps, counts)
    sweep_rules(deps, counts)
    return counts


def tick(deps: Deps, now: datetime) -> Counter[str]:
    """Publish stages 1, 2 and 4 in pages; run stages 3, 5 and 6 here."""
    counts: Counter[str] = Counter()
    for page in plan(deps, now):
        try:
            deps.bus.publish("reaper_page", page)
        except Exception as err:  # the next tick lists it again
            logs.error(f"reaper: a {page.kind} page not published: {type(err).__name__}: {err}")
            counts["errors"] += 1
        else:
            counts["pages"] += 1
    _queue(deps, now, counts)
    _outboxes(deps, counts)
    sweep_rules(deps, counts)
    return counts


def _queue(deps: Deps, now: datetime, counts: Counter[str]) -> None:
    due = deps.store.due_queue(now)
    wanted = [e.job_id for e in due if e.reason != "quota"]
    queued = read_jobs(deps, wanted)
    apply(deps, r.decide_queue(due, queued, now), now, counts)


def _outboxes(deps: Deps, counts: Counter[str]) -> None:
    published = publish_unpublished(deps.store, deps.bus)
    if published:
        counts["events"] += published
