"""Who may connect to a gang's VMs: the nodes of the same gang attempt, and no one else.

spotline's network (``tenancy.NETWORK``) lets nothing in: Compute Engine's
implied rules deny all ingress. A multi-node job's nodes must reach each other
on ports chosen at run time (the rendezvous, NCCL's, Ray's workers), so each
gang attempt gets one firewall rule that lets VMs carrying the attempt's
network tag reach VMs carrying it, on every port, and nothing else. The rule
and the tag share one name, the attempt's base VM name (``sl-JOB-aN``), so
the rule says which job and attempt it serves. A one-node job needs no rule:
its VM accepts no connection at all.

The functions make the rule before the gang's VMs are inserted (a VM that
boots before its rule would find its peers unreachable), and delete it when
the attempt is over. Whatever order the events take (a rule made twice, a
function that dies between the rule and the insert, a job that ends while its
rule is being made), ``rule_is_over`` decides from the job alone, so the
reaper removes every rule left behind.

Pure; the compute port makes and deletes the rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.placement import vm_attempt, vm_name
from spotline.shared.domain.states import JobStatus
from spotline.shared.domain.vms import Vm, VmState


def gang_tag(job_id: str, attempt: int) -> str:
    """The network tag of the attempt's VMs, and the name of its firewall rule."""
    return vm_name(job_id, attempt)


def needs_rule(nodes: int) -> bool:
    """A gang's nodes reach each other; a single VM accepts nothing."""
    return nodes > 1


def rule_attempt(name: str) -> tuple[str, int] | None:
    """The job and attempt a gang rule is for; None for a name spotline did not make."""
    found = vm_attempt(name)
    return found if found is not None and gang_tag(*found) == name else None


def rule_is_over(attempt: int, job: JobDoc | None, vms: Iterable[Vm] = ()) -> bool:
    """Whether the rule of the job's ``attempt`` may go.

    It goes once the job has ended (whatever its VMs do: a node kept stopped
    for a later job must not keep reaching its old peers), or is gone, or has
    moved to a later attempt and none of the old attempt's ``vms`` is still
    up (while the old nodes shut down, they may still be saving together). A
    rule of the current attempt, or of a later one not yet recorded (made
    before its job was), stays: the insert it was made for may come yet.
    """
    if job is None or job.status in JobStatus.terminal():
        return True
    if attempt >= job.attempt:
        return False
    down = (VmState.TERMINATED, VmState.STOPPED, VmState.SUSPENDED)
    return not any(
        vm.state not in down and vm_attempt(vm.name) == (job.job_id, attempt) for vm in vms
    )
