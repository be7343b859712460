"""The reaper's sweep in pages: what one tick hands out, and what one page does.

One function invocation cannot sweep a busy project in a minute (10,000
active jobs took 104-124 s on the emulator). So the tick
(``spotline.functions.ops.sweep.tick``) lists what the stages need and hands it out in
pages on ``spotline-reaper-page``; each page is swept by its own invocation of
``reaper_page``, as many at once as Cloud Functions runs, with the same
decisions and the same apply step as a whole sweep. ``sweep`` runs every page
in turn in one process: a small project's sweep, and the tests'.

A page is of one of three kinds, one per stage that grows with the project:

* ``vms`` (stage 1): the names of the live and stopped instances, and the
  VMs listed after them: the VMs of those names, and VMs that no listed
  instance owns. A VM always rides with its instance's name, so a page sees
  ownership as the whole listing does. The page reads the documents: a name
  was listed before the VMs and a VM is made before its document, so a listed
  name's VM is in the listing unless it is gone, which is what
  ``decide_vms`` needs. (Listing the documents in the tick cost it 10,000
  documents' decoding; keys alone are light, and each document is one read
  either way.) It also runs stage 2 on the active jobs its names were made
  for, read once for both stages.
* ``jobs`` (stage 2): the other active jobs' ids; the page reads the jobs.
* ``users`` (stage 4): user names; the page reads the users, then their jobs,
  then their instances, the order ``decide_slots`` needs. Only the users
  with a slot that the tick's listings do not show held (a job not listed
  active, a VM not listed live or stopped; ``users_in_doubt``): every other
  slot is one stage 4 would keep, and reading them again was 20,000 of a
  10,000-job sweep's 64,005 reads. The tick lists the users' documents
  (a key costs a read as a document does) after the jobs and VMs.

A page is decided at the tick's time (``listed_at``) and applied at its own
(its writes' timestamps, the apply step's guards), and one that arrives more
than ``reaper_page_max_age_s`` late is dropped: the next tick lists afresh.
Two ticks' pages (Scheduler may fire twice), a redelivered page and pages
running at once are what two sweeps at once always were: every apply step is
re-entrant and guarded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from spotline.functions.deps import Deps
from spotline.functions.ops.sweep_apply import apply
from spotline.shared.domain import reaping as r
from spotline.shared.domain.documents import InstanceDoc, JobDoc, UserDoc
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus
from spotline.shared.domain.vms import MANAGED_LABEL, Vm

T = TypeVar("T")

Kind = Literal["vms", "jobs", "users"]

# Keys per listing call: keys are small, and each call of a paged query costs
# the emulator more than its size (10,000 keys: 6 to 14 s by 1,000, 2.6 to
# 3.5 s by 5,000).
KEYS_PER_CALL = 5000
# Pub/Sub takes messages up to 10 MB; a page past this is split in two.
MAX_PAGE_BYTES = 4_000_000


class SweepPage(BaseModel):
    """One page of a tick, as published on ``spotline-reaper-page``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind
    listed_at: datetime  # the tick's time: the page is decided as of it
    names: list[str] = []  # vms: instance names, listed live or stopped before the VMs
    vms: list[Vm] = []  # vms: as listed after the names
    keys: list[str] = []  # vms, jobs: active job ids; users: user names


def plan(deps: Deps, now: datetime) -> list[SweepPage]:
    """List what stages 1, 2 and 4 need, keys alone (the users' documents),
    in the order stage 1 needs (instances, then VMs), and cut it into pages
    of ``reaper_page_size``; stage 4's only for the users in doubt."""
    store, size, per_call = deps.store, deps.settings.reaper_page_size, KEYS_PER_CALL
    live = InstanceStatus.live()
    names = every(lambda after: store.list_instance_names(live, per_call, after), per_call)
    stopped = every(lambda after: store.stopped_instance_names(per_call, after), per_call)
    vms = deps.compute.list({MANAGED_LABEL: "true"})
    active = JobStatus.active()
    job_ids = every(lambda after: store.list_job_ids(active, per_call, after), per_call)
    # The users' documents, not their keys: a key is billed as a read too.
    users = every_user(deps, per_call)
    doubt = r.users_in_doubt(users, set(job_ids), set(names), set(stopped))
    with_vms = vm_pages([*names, *stopped], vms, job_ids, now, size)
    taken = {job_id for page in with_vms for job_id in page.keys}
    return [
        *with_vms,
        *_key_pages("jobs", [j for j in job_ids if j not in taken], now, size),
        # A user's page reads their jobs and VMs too: a document a slot.
        *_key_pages("users", doubt, now, max(size // 10, 1)),
    ]


def vm_pages(
    listed: Sequence[str], vms: Sequence[Vm], job_ids: Sequence[str], now: datetime, size: int
) -> list[SweepPage]:
    """Pages of ``size`` instance names (``listed``: live and stopped; one
    listed both ways, moved between the two listings, is one name), each with
    its VMs and the active jobs its names were made for (each job in one page);
    then the VMs no listed name owns."""
    by_name = {vm.name: vm for vm in vms}
    names = sorted(set(listed))
    active, taken = set(job_ids), set[str]()
    pages = []
    for chunk in _chunks(names, size):
        made_for = dict.fromkeys(r.job_of_vm(name) for name in chunk)
        keys = [j for j in made_for if j in active and j not in taken]
        taken.update(keys)
        vms_of = [by_name[name] for name in chunk if name in by_name]
        pages.append(SweepPage(kind="vms", listed_at=now, names=list(chunk), vms=vms_of, keys=keys))
    owned = set(names)
    orphans = [vm for vm in vms if vm.name not in owned]
    pages += [SweepPage(kind="vms", listed_at=now, vms=list(c)) for c in _chunks(orphans, size)]
    return [part for page in pages for part in fit(page)]


def fit(page: SweepPage) -> list[SweepPage]:
    """The page, or its halves (and theirs), each under ``MAX_PAGE_BYTES``; a
    VM stays with its name."""
    if len(page.model_dump_json()) <= MAX_PAGE_BYTES:
        return [page]
    for field in ("names", "vms", "keys"):
        items = getattr(page, field)
        if len(items) > 1:
            return [*fit(_half(page, field, True)), *fit(_half(page, field, False))]
    return [page]  # one VM or key: far under the limit


def _half(page: SweepPage, field: str, first: bool) -> SweepPage:
    items = getattr(page, field)
    cut = len(items) // 2
    part = items[:cut] if first else items[cut:]
    if field != "names":
        return page.model_copy(update={field: part})
    mine = set(part)
    owned = set(page.names)
    # A VM goes with its name; VMs no name owns, and the jobs, with the first half.
    vms = [vm for vm in page.vms if vm.name in mine or (first and vm.name not in owned)]
    return page.model_copy(update={"names": part, "vms": vms, "keys": page.keys if first else []})


def run_page(deps: Deps, page: SweepPage, now: datetime | None = None) -> Counter[str]:
    """One page's stage, decided as of ``page.listed_at`` and applied at
    ``now`` (when the page runs; default the tick's time); the count of each
    outcome.

    Decided as of the tick: the listing is of then. Applied, and stamped, at
    the page's own time: a page runs up to ``reaper_page_max_age_s`` late, and
    a write stamped with the tick's time dates a step that earlier than it
    began (a stop or a placement then looks dead ``request_timeout_s`` too soon,
    and the reaper starts a second one while the first still runs)."""
    decided = page.listed_at
    applied = decided if now is None else max(now, decided)
    if page.kind == "vms":
        docs = deps.store.get_instances(page.names)
        found = [docs[name] for name in page.names if name in docs]
        live = [i for i in found if i.status in InstanceStatus.live()]
        stopped = [i for i in found if i.substatus == InstanceSubstatus.STOPPED]
        return reap_vms(deps, live, stopped, page.vms, decided, page.keys, applied)
    if page.kind == "jobs":
        jobs = deps.store.get_jobs(page.keys)
        return _reap_jobs(deps, page.keys, jobs, decided, applied, Counter())
    # Users, then their jobs, then their instances (see ``decide_slots``).
    found_users = deps.store.get_users(page.keys)
    users = [found_users[k] for k in page.keys if k in found_users]
    names = [n for u in users for n in [*u.active_instances, *u.stopped_instances]]
    owners = read_jobs(
        deps, [j for u in users for j in u.active_jobs] + list(map(r.job_of_vm, names))
    )
    held = deps.store.get_instances(names)
    return apply(deps, r.decide_slots(users, owners, held), applied)


def reap_vms(
    deps: Deps,
    instances: Sequence[InstanceDoc],
    stopped: Sequence[InstanceDoc],
    vms: Sequence[Vm],
    now: datetime,
    job_ids: Sequence[str] = (),
    applied: datetime | None = None,
) -> Counter[str]:
    """Stage 1 on listings made before: the jobs are read after them. Then
    stage 2 on the active ones among ``job_ids``, read with them. Decided as
    of ``now``, applied at ``applied`` (default ``now``)."""
    at = now if applied is None else applied
    wanted = [i.job_id for i in instances] + [vm.labels.get(r.JOB_LABEL, "") for vm in vms]
    jobs = read_jobs(deps, [*wanted, *job_ids])
    counts = apply(deps, r.decide_vms(instances, stopped, vms, jobs, deps.settings, now), at)
    return _reap_jobs(deps, job_ids, jobs, now, at, counts)


def _reap_jobs(
    deps: Deps,
    job_ids: Sequence[str],
    jobs: dict[str, JobDoc],
    now: datetime,
    applied: datetime,
    counts: Counter[str],
) -> Counter[str]:
    active = JobStatus.active()
    found = [jobs[j] for j in job_ids if j in jobs and jobs[j].status in active]
    return apply(deps, r.decide_jobs(found, deps.settings, now), applied, counts)


def read_jobs(deps: Deps, job_ids: Iterable[str]) -> dict[str, JobDoc]:
    # In batches: one get per job made a 10,000-job sweep take minutes.
    return deps.store.get_jobs(job_id for job_id in job_ids if job_id)


def every(page: Callable[[str | None], Sequence[str]], limit: int) -> list[str]:
    """Every key of a listing, ``page(after)`` called until a page is short of
    ``limit`` (a listing with a fixed limit once left a busy project unswept)."""
    return _paged(page, limit, str)


def every_user(deps: Deps, limit: int) -> list[UserDoc]:
    """Every user's document, as ``every`` lists keys."""
    return _paged(lambda after: deps.store.list_users(limit, after), limit, lambda u: u.user)


def _paged(
    page: Callable[[str | None], Sequence[T]], limit: int, key: Callable[[T], str]
) -> list[T]:
    found: list[T] = []
    after: str | None = None
    while True:
        batch = page(after)
        found.extend(batch)
        if len(batch) < limit:
            return found
        after = key(batch[-1])


def _key_pages(kind: Kind, keys: Sequence[str], now: datetime, size: int) -> list[SweepPage]:
    pages = [SweepPage(kind=kind, listed_at=now, keys=list(c)) for c in _chunks(keys, size)]
    return [part for page in pages for part in fit(page)]


def _chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
