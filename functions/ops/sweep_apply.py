"""The reaper's apply step: each decided action (``spotline.shared.domain.reaping``)
through ops, one at a time. The listing an action was decided on is older than
the moment it runs (and older still in a page the tick handed out), so the
actions that could act on a document that moved on re-read it first, with the
predicate the decision used."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime

from spotline.functions.deps import Deps
from spotline.functions.ops.jobs import (
    cancel,
    place_again,
    release_job,
    retry_placement,
    retry_waiting,
    settle,
)
from spotline.functions.ops.node_replacement import tend
from spotline.functions.ops.queue import drop, give_up
from spotline.functions.ops.recovery import judge_held_finish, recover
from spotline.functions.ops.restore_gate import open_restore_gate
from spotline.functions.ops.slots import free_instance_slot, free_stopped_slot
from spotline.functions.ops.teardown import (
    delete_orphan,
    end_cooling,
    end_stopped,
    finish_closing,
    forget_stopped,
    lose_cooling,
    price_cooling,
    release_instance,
)
from spotline.shared import logs
from spotline.shared.domain import reaping as r
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.lifecycle import accrue
from spotline.shared.domain.liveness import Owner
from spotline.shared.domain.slot_checks import placing
from spotline.shared.domain.states import JobSubstatus


def apply(
    deps: Deps, actions: Sequence[r.Action], now: datetime, counts: Counter[str] | None = None
) -> Counter[str]:
    """Run each action through ops, one at a time: a failure is logged and the
    sweep goes on (the next tick retries it). The count of each outcome."""
    counts = Counter() if counts is None else counts
    for action in actions:
        try:
            outcome = _APPLY[type(action)](deps, action, now)
        except PermanentError as err:
            logs.warning(f"reaper: {err}")
            outcome = "skipped"
        except Exception as err:
            logs.error(f"reaper: {type(err).__name__}: {err}")
            outcome = "errors"
        if outcome:
            counts[outcome] += 1
    return counts


# -- each action through ops; the guards re-read what the listing may have missed --


def _recover(deps: Deps, action: r.Recover, now: datetime) -> str:
    recover(deps, action.instance, action.cause, now, note=action.note)
    return "stalled" if action.cause == JobSubstatus.STALLED else "missed_preemptions"


def _release(deps: Deps, action: r.Release, now: datetime) -> str | None:
    # The listing is older than the job read: the instance may have moved on.
    if r.moved_on(action.instance, deps.store.get_instance(action.instance.name)):
        return None
    owner = Owner.of(action.instance)  # and between that read and this write
    release_instance(deps, action.instance.name, now, note="no live job owns it", owner=owner)
    open_restore_gate(deps, action.instance.job_id, now, gone=[action.instance.name])
    return "released"


def _finish_closing(deps: Deps, action: r.FinishClosing, now: datetime) -> str:
    finish_closing(deps, action.instance, now)
    # The function that began this delete died before it told the job's
    # next attempt (placed meanwhile) that the VM is gone.
    open_restore_gate(deps, action.instance.job_id, now, gone=[action.instance.name])
    return "closed"


def _price_cooling(deps: Deps, action: r.PriceCooling, now: datetime) -> str:
    price_cooling(deps, action.instance, now)
    return "cooling"


def _end_cooling(deps: Deps, action: r.EndCooling, now: datetime) -> str:
    priced = price_cooling(deps, action.instance, now)
    if priced is None:
        return "cooling"  # claimed meanwhile
    # end_cooling's guarded write loses to a job claiming the VM at this moment.
    expired = priced.cooling_until is not None and now >= priced.cooling_until
    ended = expired and end_cooling(deps, priced, now, "cooling period over")
    return "cooling_ended" if ended else "cooling"


def _lose_cooling(deps: Deps, action: r.LoseCooling, now: datetime) -> str:
    priced = price_cooling(deps, action.instance, now)
    if priced is None:
        return "cooling"  # claimed meanwhile
    lose_cooling(deps, priced, now)
    return "cooling_ended"


def _end_stopped(deps: Deps, action: r.EndStopped, now: datetime) -> str | None:
    # The guarded write keeps a VM a job restarted meanwhile.
    return "stopped_ended" if end_stopped(deps, action.instance, now) else None


def _forget_stopped(deps: Deps, action: r.ForgetStopped, now: datetime) -> str:
    forget_stopped(deps, action.instance, now)
    return "stopped_lost"


def _delete_orphan(deps: Deps, action: r.DeleteOrphan, now: datetime) -> str | None:
    vm = action.vm
    # Owned after all? Its document may have moved between the sweep's
    # listings (a stopped VM restarted for a job, a VM being stopped, a
    # preempted one closed while it saves its state).
    instance = deps.store.get_instance(vm.name)
    job_id = vm.labels.get(r.JOB_LABEL, "")
    job = deps.store.get_job(job_id) if job_id else None
    if not r.orphaned(vm, instance, job, now):
        return None
    delete_orphan(deps, vm)  # charged to its job when no attempt recorded it
    if job is not None:
        open_restore_gate(deps, job.job_id, now, gone=[vm.name])
    logs.warning(f"reaper: deleted orphan VM {vm.name} in {vm.zone}", instance=vm.name)
    return "orphans_deleted"


def _accrue(deps: Deps, action: r.Accrue, now: datetime) -> None:
    # Another writer may have priced the job past ``now`` since the sweep
    # decided (a newer tick's page on a faster clock, ``sweep``'s tick time,
    # an attempt's end): pricing it again at ``now`` would lower its cost.
    def priced(current: JobDoc) -> JobDoc:
        if current.cost_as_of is not None and current.cost_as_of > now:
            return current
        return accrue(current, now)

    deps.store.update_job(action.job.job_id, priced)


def _cancel(deps: Deps, action: r.Cancel, now: datetime) -> str:
    cancel(deps, action.job.job_id, action.reason, now)
    return "over_max_runtime"


def _judge_finish(deps: Deps, action: r.JudgeFinish, now: datetime) -> str | None:
    return judge_held_finish(deps, action.job.job_id, now)


def _tend_replacement(deps: Deps, action: r.TendReplacement, now: datetime) -> str | None:
    return tend(deps, action.job.job_id, now)


def _place_again(deps: Deps, action: r.PlaceAgain, now: datetime) -> str | None:
    return place_again(deps, action.job, now)


def _retry_quota(deps: Deps, action: r.RetryQuota, now: datetime) -> str:
    return retry_waiting(deps, action.entry, now)


def _retry_placement(deps: Deps, action: r.RetryPlacement, now: datetime) -> str:
    tried = retry_placement(deps, action.job, now)
    return "placed" if tried.substatus in JobSubstatus.on_vm() else "waiting"


def _give_up(deps: Deps, action: r.GiveUp, now: datetime) -> str:
    settle(deps, give_up(deps, action.job.job_id, action.reason, now), now)
    return "gave_up"


def _drop(deps: Deps, action: r.DropEntry, now: datetime) -> str:
    drop(deps, action.entry.job_id)
    return "queue_dropped"


def _free_job_slot(deps: Deps, action: r.FreeJobSlot, now: datetime) -> str:
    release_job(deps, action.user, action.job_id, now)
    return "slots_freed"


def _free_instance_slot(deps: Deps, action: r.FreeInstanceSlot, now: datetime) -> str | None:
    # Read again, in the decision's order (the user, the jobs, the instance):
    # a placement or a restart may have taken or finished it since.
    store, made_for = deps.store, r.job_of_vm(action.name)
    user = store.get_user(action.user)
    if user is None or action.name not in user.active_instances:
        return None
    jobs = store.get_jobs(j for j in [*user.active_jobs, made_for] if j)
    instance = store.get_instance(action.name)
    restarting = placing(user, jobs)
    if not r.instance_slot_stale(action.name, jobs.get(made_for), instance, restarting):
        return None
    # Only from the user as read: a restart that took this name after that
    # read (it was freed and taken again meanwhile) keeps it.
    freed = free_instance_slot(deps, action.user, action.name, now, as_read=user)
    return "slots_freed" if freed else None


def _free_stopped_slot(deps: Deps, action: r.FreeStoppedSlot, now: datetime) -> str | None:
    if not r.stopped_slot_stale(deps.store.get_instance(action.name)):
        return None  # stopped (again) since it was read
    free_stopped_slot(deps, action.user, action.name, now)
    return "slots_freed"


_APPLY: dict[type, Callable[..., str | None]] = {
    r.Recover: _recover,
    r.Release: _release,
    r.FinishClosing: _finish_closing,
    r.PriceCooling: _price_cooling,
    r.EndCooling: _end_cooling,
    r.LoseCooling: _lose_cooling,
    r.EndStopped: _end_stopped,
    r.ForgetStopped: _forget_stopped,
    r.DeleteOrphan: _delete_orphan,
    r.Accrue: _accrue,
    r.Cancel: _cancel,
    r.JudgeFinish: _judge_finish,
    r.TendReplacement: _tend_replacement,
    r.PlaceAgain: _place_again,
    r.RetryQuota: _retry_quota,
    r.RetryPlacement: _retry_placement,
    r.GiveUp: _give_up,
    r.DropEntry: _drop,
    r.FreeJobSlot: _free_job_slot,
    r.FreeInstanceSlot: _free_instance_slot,
    r.FreeStoppedSlot: _free_stopped_slot,
}
