"""What the adversarial suites check after a run (``tests.replay``): each job
ended as planned, in the state a clean run gives, with nothing left behind."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import timedelta
from itertools import pairwise
from typing import Any

from spotline.shared.contract.assignment import Regroup
from spotline.shared.domain.documents import HistoryEntry, JobDoc
from spotline.shared.domain.job_events import JobEvent
from spotline.shared.domain.late_finish import SUPERSEDED, ended_after_loss
from spotline.shared.domain.lifecycle import VM_PHASES
from spotline.shared.domain.placement import vm_attempt
from spotline.shared.domain.pricing import vm_cost
from spotline.shared.domain.states import SETTING_UP, InstanceStatus, JobStatus, JobSubstatus
from spotline.shared.domain.vms import REGROUP_METADATA_KEY
from tests.replay import T0, World


def outcome(job: JobDoc) -> dict[str, Any]:
    """What a job ends with, in the fields a person (and the bill) reads.

    The steps a VM reported (``VM_PHASES``) are left out of the history: a
    lost or canceled attempt's late reports are rightly ignored, so a shuffled
    run may show fewer of them (``phase_problems`` checks what it shows).
    """
    return {
        "status": job.status,
        "substatus": job.substatus,
        "attempt": job.attempt,
        "preemptions": job.preemptions,
        "progress": job.progress,
        "cost_usd": job.cost_usd,
        "on_demand_cost_usd": job.on_demand_cost_usd,
        "attempts": [(a.attempt, a.outcome, a.checkpoint_step, a.cost_usd) for a in job.attempts],
        "history": [(h.substatus, h.attempt) for h in job.history if h.substatus not in VM_PHASES],
    }


def inserts(world: World) -> Counter[tuple[str, int]]:
    """VM inserts Compute Engine received, by the job and attempt their labels
    name; a gang's bulk insert counts once, whatever its nodes. A gang's
    replacement node is not an attempt's insert (``replacement_inserts``)."""
    counted: Counter[tuple[str, int]] = Counter()
    singles = world.cloud.requests_to("POST", "/instances")
    for request in singles:
        if _REPLACEMENT.search(request.body.get("name", "")):
            continue
        labels = request.body.get("labels", {})
        counted[(labels.get("spotline-job", ""), int(labels.get("spotline-attempt", 0)))] += 1
    for request in world.cloud.requests_to("POST", "/instances/bulkInsert"):
        labels = request.body.get("instanceProperties", {}).get("labels", {})
        counted[(labels.get("spotline-job", ""), int(labels.get("spotline-attempt", 0)))] += 1
    return counted


def problems(world: World, *, claims: bool = False) -> list[str]:
    """Every way the world differs from a job's plan, or leaks.

    Args:
        claims: an attempt may have claimed a cooling VM instead of inserting one.
    """
    found = []
    store = world.memory
    sent = inserts(world)
    for plan in world.plans.values():
        job = store.get_job(plan.job_id)
        if job is None:
            found.append(f"{plan.job_id}: no job")
            continue
        status, attempt, preemptions = plan.expected()
        got = (job.status, job.attempt, job.preemptions)
        if got != (status, attempt, preemptions):
            found.append(f"{plan.job_id}: {got}, planned {(status, attempt, preemptions)}")
        for n in range(1, job.attempt + 1):
            if sent[(plan.job_id, n)] > 1 or (sent[(plan.job_id, n)] == 0 and not claims):
                found.append(f"{plan.job_id}: {sent[(plan.job_id, n)]} inserts for attempt {n}")
        # An attempt a late finish superseded (``late_finish``) may have had its one VM.
        superseded = {r.attempt for r in job.attempts if r.outcome == SUPERSEDED}
        for (j, n), count in sent.items():
            if j == plan.job_id and n > job.attempt and (n not in superseded or count > 1):
                found.append(f"{plan.job_id}: {count} inserts for attempt {n}, past {job.attempt}")
        found += cost_problems(job) + phase_problems(job) + event_problems(world, job)
        found += replacement_problems(world, job) + regroup_problems(world, job)
        if plan.regroups() and job.status == JobStatus.COMPLETED:
            replaced = [r.replacement for a in job.attempts for r in a.replaced_nodes]
            if len(replaced) != plan.lost_nodes():
                found.append(f"{plan.job_id}: replaced by {replaced}, {plan.lost_nodes()} lost")
    found += [f"VM left: {vm['name']} {vm['state']}" for vm in world.cloud.list()]
    for instance in store.list_instances():
        if instance.status != InstanceStatus.CLOSED:
            found.append(f"instance {instance.name}: {instance.status}/{instance.substatus}")
    for user in store.list_users():
        if user.active_jobs or user.active_instances or user.stopped_instances:
            found.append(f"user {user.user} holds {user.model_dump(include=_SLOTS)}")
    queued = store.due_queue(T0 + timedelta(days=30), limit=1000)
    found += [f"queue entry left: {entry.job_id} ({entry.reason})" for entry in queued]
    return found


_SLOTS = {"active_jobs", "active_instances", "stopped_instances"}
# A gang's replacement node's name (``placement.replacement_name``; a
# replacement's own replacement with its count).
_REPLACEMENT = re.compile(r"-g\d+(-\d+)?$")


def replacement_inserts(world: World) -> Counter[str]:
    """Inserts of gangs' replacement nodes Compute Engine received, by VM name."""
    return Counter(
        request.body["name"]
        for request in world.cloud.requests_to("POST", "/instances")
        if _REPLACEMENT.search(request.body.get("name", ""))
    )


def replacement_problems(world: World, job: JobDoc) -> list[str]:
    """Each replacement node inserted once (never a second VM for a rank),
    every one the job's attempt records name, with its id; each lost node's
    VM gone (deleted by spotline, or by Compute Engine at the notice's end:
    a Spot VM's termination action is DELETE)."""
    found = []
    mine = {
        name: count
        for name, count in replacement_inserts(world).items()
        if (vm_attempt(name) or ("", 0))[0] == job.job_id
    }
    found += [
        f"{job.job_id}: {count} inserts of {name}" for name, count in mine.items() if count > 1
    ]
    recorded = {r.replacement: r for a in job.attempts for r in a.replaced_nodes}
    if set(mine) != set(recorded):
        found.append(f"{job.job_id}: inserted {sorted(mine)}, its attempts name {sorted(recorded)}")
    for swap in recorded.values():
        if not swap.instance_id:
            found.append(f"{job.job_id}: {swap.replacement} recorded with no instance id")
        if any(vm["name"] == swap.lost for vm in world.cloud.list()):
            found.append(f"{job.job_id}: the lost {swap.lost} is left")
    return found


def regroup_problems(world: World, job: JobDoc) -> list[str]:
    """Every node of a regroup told the same node list for its generation,
    and no node anything else; a job that ended regrouped told its last one."""
    found = []
    told: dict[int, dict[str, str]] = defaultdict(dict)  # generation -> node -> what it was told
    lost = {r.lost for a in job.attempts for r in a.replaced_nodes}
    for request in world.cloud.requests_to("POST", "/setMetadata"):
        name = request.path.rsplit("/", 2)[-2]
        if (vm_attempt(name) or ("", 0))[0] != job.job_id:
            continue
        items = {i["key"]: i.get("value") for i in request.body.get("items", [])}
        value = items.get(REGROUP_METADATA_KEY)
        if value is None:
            continue
        generation = Regroup.model_validate_json(value).generation
        if told[generation].setdefault(name, value) != value:
            found.append(f"{job.job_id}: {name} told two regroups of generation {generation}")
    for generation, nodes in sorted(told.items()):
        values = set(nodes.values())
        if len(values) != 1:
            found.append(f"{job.job_id}: generation {generation} told as {sorted(values)}")
            continue
        gang = Regroup.model_validate_json(values.pop()).nodes
        # A node lost as the regroup was told (its VM gone: it cannot be
        # told) is replaced after it, at a newer generation.
        untold = set(gang) - set(nodes) - lost
        if untold or set(nodes) - set(gang):
            found.append(f"{job.job_id}: generation {generation} of {gang} told {sorted(nodes)}")
    last = job.gang_generation
    if job.status == JobStatus.COMPLETED and last and last not in told:
        found.append(f"{job.job_id}: ended on generation {job.gang_generation}, never told")
    return found


def event_problems(world: World, job: JobDoc) -> list[str]:
    """Every state change of the job was published once the run settled:
    sequences 1..n with no gap, each copy of an event equal to the first, the
    last one the job's state, nothing left in its outbox."""
    found = []
    first: dict[int, JobEvent] = {}
    for event in world.bus.events("job_events"):
        if not isinstance(event, JobEvent) or event.job_id != job.job_id:
            continue
        kept = first.setdefault(event.sequence, event)
        if kept != event:
            found.append(f"{job.job_id}: two different events {event.event_id}")
    if sorted(first) != list(range(1, job.event_sequence + 1)):
        found.append(f"{job.job_id}: events {sorted(first)} of {job.event_sequence}")
    last = first.get(job.event_sequence)
    if last is None or (last.status, last.substatus) != (job.status, job.substatus):
        found.append(f"{job.job_id}: last event {last and last.substatus}, job {job.substatus}")
    if job.pending_events:
        found.append(f"{job.job_id}: events left unpublished {job.pending_events}")
    return found


def cost_problems(job: JobDoc) -> list[str]:
    """The job's cost is each attempt's VM time at its price, counted once,
    and that of each VM no attempt recorded (``unrecorded_vms``)."""
    found = []
    total = 0.0
    for record in [*job.attempts, *job.unrecorded_vms]:
        if record.ended_at is None:
            found.append(f"{job.job_id}: attempt {record.attempt} never ended")
            continue
        seconds = (record.ended_at - record.started_at).total_seconds()
        vms = getattr(record, "nodes", 1)  # a gang's attempt: each node at its price
        if record.cost_usd != round(vm_cost(record.price_per_hour, seconds * vms), 6):
            found.append(f"{job.job_id}: attempt {record.attempt} costs {record.cost_usd}")
        total += record.cost_usd
    if job.cost_usd != round(total + job.cooling_cost_usd, 6):
        found.append(f"{job.job_id}: costs {job.cost_usd}, its attempts {total}")
    kept = sorted(r.attempt for r in job.attempts if r.outcome != SUPERSEDED)
    if kept != list(range(1, job.attempt + 1)):
        found.append(f"{job.job_id}: attempt records {[r.attempt for r in job.attempts]}")
    if any(r.attempt <= job.attempt for r in job.attempts if r.outcome == SUPERSEDED):
        found.append(f"{job.job_id}: an attempt up to {job.attempt} superseded")
    return found


_OPTIONAL = {JobSubstatus.GEARING_UP_ENV, JobSubstatus.INSTALLING_REQUIREMENTS}


def phase_problems(job: JobDoc) -> list[str]:
    """Each attempt's VM steps in the history in order, each once; all of them
    (but gearing up) for the attempt a job completed on, unless its finish
    came after its loss was recorded (``late_finish``: the steps the finish
    reports are not written behind the loss).

    A line that repeats the state of the line before is a note on the state
    (a late finish while the next attempt trains), not a step; nor is a
    gang's return to where it was once it regrouped around a replaced node.
    A regroup may also move it on: a node lost as the gang read as setting
    up, whose reports then showed it training (``node_replacement.trained``),
    regroups to training, a step the history shows then for the first time."""
    found = []
    moves: list[HistoryEntry] = []
    for before, h in zip([None, *job.history], job.history, strict=False):
        if before is not None and _repeats(h, before):
            continue
        if before is not None and _regrouped(h, before) and _reached(h, moves):
            continue
        moves.append(h)
    for attempt in range(1, job.attempt + 1):
        seen = [h.substatus for h in moves if h.attempt == attempt and h.substatus in VM_PHASES]
        if seen != [p for p in VM_PHASES if p in seen]:
            found.append(f"{job.job_id}: attempt {attempt} went through {seen}")
    # A claimed cooling VM needs no gear-up, and code with no requirements.txt
    # no install: the other steps it went through. Nor are the steps of
    # setting up its nodes reported while a node lost as it set up was
    # replaced written behind the regroup.
    completed = job.status == JobStatus.COMPLETED and not ended_after_loss(job)
    required = set(VM_PHASES) - _OPTIONAL - (SETTING_UP if _lost_setting_up(job) else set())
    if completed and not required <= set(seen):
        found.append(f"{job.job_id}: completed through {seen}")
    return found


def _regrouped(entry: HistoryEntry, before: HistoryEntry) -> bool:
    """A gang's return, once regrouped, to training or to the step of
    setting up it lost its node in."""
    return before.substatus == JobSubstatus.REPLACING_NODE and entry.substatus in VM_PHASES


def _lost_setting_up(job: JobDoc) -> bool:
    """Whether the job's current attempt lost a node while it read as setting up."""
    lines = [h for h in job.history if h.attempt == job.attempt]
    return any(
        h.substatus == JobSubstatus.REPLACING_NODE and before.substatus in SETTING_UP
        for before, h in pairwise(lines)
    )


def _reached(entry: HistoryEntry, moves: list[HistoryEntry]) -> bool:
    """Whether the attempt went through ``entry``'s step before."""
    return any((h.substatus, h.attempt) == (entry.substatus, entry.attempt) for h in moves)


def _repeats(entry: HistoryEntry, before: HistoryEntry) -> bool:
    return (entry.substatus, entry.attempt) == (before.substatus, before.attempt)
