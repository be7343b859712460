"""A gang attempt's firewall rule (``spotline.shared.domain.gang_network``):
made before its VMs are inserted, deleted when the attempt is over.

``end_rule`` is called where an attempt's VMs go (their release, the job's
end); ``sweep_rules`` is the reaper's stage for every rule a crash, a race or
a lost event left: each is judged from its job alone, so a rule made twice,
one whose insert never came, and one made while its job ended all go once
their job has ended or moved on.
"""

from __future__ import annotations

from collections import Counter

from spotline.functions.deps import Deps
from spotline.shared import logs
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import PermanentError, SpotlineError, Unplaceable
from spotline.shared.domain.gang_network import gang_tag, rule_attempt, rule_is_over
from spotline.shared.domain.states import JobStatus
from spotline.shared.domain.vms import Vm


def allow_gang(deps: Deps, job: JobDoc) -> None:
    """The rule of the job's current attempt, in force before its VMs are inserted.

    Raises:
        Unplaceable: Compute Engine refuses the rule for good (the functions'
            account lacks the role a deploy grants, or another rule holds its
            name): the job cannot run, and ends FAILED saying why.
        TransientError: it may pass later.
    """
    tag = gang_tag(job.job_id, job.attempt)
    try:
        deps.compute.allow_gang(tag)
    except Unplaceable:
        raise
    except PermanentError as err:
        raise Unplaceable(
            f"the firewall rule that lets the job's nodes reach each other ({tag}) could "
            f"not be made ({err}): run `spotline deploy` again (it grants the functions "
            "that right), or remove the rule that holds its name"
        ) from err


def end_rule(deps: Deps, job_id: str, attempt: int) -> bool:
    """Delete the attempt's rule if it is over (read now); True if it was.

    Called where VMs are let go: a failure to delete the rule must not stop
    that, so it is logged and left to the reaper (``sweep_rules``)."""
    try:
        job = deps.store.get_job(job_id)
        if not rule_is_over(attempt, job, _attempt_vms(deps, job, attempt)):
            return False
        deps.compute.end_gang(gang_tag(job_id, attempt))
    except SpotlineError as err:
        logs.warning(f"firewall rule {gang_tag(job_id, attempt)} left to the reaper: {err}",
                     job_id=job_id)  # fmt: skip
        return False
    return True


def sweep_rules(deps: Deps, counts: Counter[str]) -> None:
    """The reaper's stage: every gang rule whose attempt is over, deleted."""
    try:
        names = deps.compute.gang_rules()
    except Exception as err:  # the next tick lists them again
        logs.error(f"reaper: firewall rules not listed: {type(err).__name__}: {err}")
        counts["errors"] += 1
        return
    rules = {name: found for name in names if (found := rule_attempt(name))}
    if not rules:
        return
    jobs = deps.store.get_jobs({job_id for job_id, _ in rules.values()})
    for name, (job_id, attempt) in sorted(rules.items()):
        job = jobs.get(job_id)
        if not rule_is_over(attempt, job, _attempt_vms(deps, job, attempt)):
            continue
        try:
            deps.compute.end_gang(name)
        except Exception as err:  # the next tick tries again
            logs.error(f"reaper: firewall rule {name} not deleted: {type(err).__name__}: {err}")
            counts["errors"] += 1
        else:
            logs.info(f"firewall rule {name} deleted: its attempt is over", job_id=job_id)
            counts["gang rules deleted"] += 1


def _attempt_vms(deps: Deps, job: JobDoc | None, attempt: int) -> list[Vm]:
    """The VMs of an earlier attempt of a live job (nothing else needs them read)."""
    if job is None or job.status in JobStatus.terminal() or attempt >= job.attempt:
        return []
    labels = {"spotline-job": job.job_id, "spotline-attempt": str(attempt)}
    return deps.compute.list(labels)
