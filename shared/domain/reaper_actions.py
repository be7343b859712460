"""The reaper's actions: what ``spotline.shared.domain.reaping`` decides, frozen, one
class per thing the apply step (``spotline.functions.ops.sweep``) does, by stage."""

from __future__ import annotations

from dataclasses import dataclass

from spotline.shared.domain.documents import InstanceDoc, JobDoc, QueueEntry
from spotline.shared.domain.states import JobSubstatus
from spotline.shared.domain.vms import Vm

# -- stage 1: instances and VMs --


@dataclass(frozen=True)
class Recover:
    """The job's VM is lost (vanished: PREEMPTED; silent: STALLED): next attempt."""

    instance: InstanceDoc
    cause: JobSubstatus
    note: str


@dataclass(frozen=True)
class Release:
    """No live job owns the instance: delete its VM (unless it moved on meanwhile)."""

    instance: InstanceDoc


@dataclass(frozen=True)
class FinishClosing:
    """A function died while it closed the instance: stop or delete it, as it meant to."""

    instance: InstanceDoc


@dataclass(frozen=True)
class PriceCooling:
    """The cooling period so far, priced for a person watching."""

    instance: InstanceDoc


@dataclass(frozen=True)
class EndCooling:
    """The cooling period is over: priced, then ended (unless claimed meanwhile)."""

    instance: InstanceDoc


@dataclass(frozen=True)
class LoseCooling:
    """The cooling VM is gone: priced, charged, closed (unless claimed meanwhile)."""

    instance: InstanceDoc


@dataclass(frozen=True)
class EndStopped:
    """The stop period is over: delete the stopped VM (unless restarted meanwhile)."""

    instance: InstanceDoc


@dataclass(frozen=True)
class ForgetStopped:
    """The stopped VM is gone: close its document, free its slots."""

    instance: InstanceDoc


@dataclass(frozen=True)
class DeleteOrphan:
    """A spotline VM that no instance owns and no placement is making."""

    vm: Vm


# -- stage 2: jobs --


@dataclass(frozen=True)
class Accrue:
    """The running attempt's cost so far, for a person watching the job."""

    job: JobDoc


@dataclass(frozen=True)
class Cancel:
    job: JobDoc
    reason: str


@dataclass(frozen=True)
class PlaceAgain:
    """Left in REQUESTING_SERVER (its function died): placed again, unless queued."""

    job: JobDoc


@dataclass(frozen=True)
class JudgeFinish:
    """A gang node's non-zero exit held past the notice with no preemption of
    its attempt: judged as a finish (``spotline.shared.domain.gang_finish``)."""

    job: JobDoc


@dataclass(frozen=True)
class TendReplacement:
    """A gang replacing a lost node: its replacement inserted if a function
    died first, the gang regrouped if ready (a regroup recorded and not
    told: told), or relaunched whole past its bound
    (``spotline.shared.domain.node_replacement``)."""

    job: JobDoc


# -- stage 3: the queue --


@dataclass(frozen=True)
class RetryQuota:
    """One more try for a job waiting for quota (the try decides whether it gives up)."""

    entry: QueueEntry


@dataclass(frozen=True)
class RetryPlacement:
    job: JobDoc
    entry: QueueEntry


@dataclass(frozen=True)
class GiveUp:
    job: JobDoc
    entry: QueueEntry
    reason: str


@dataclass(frozen=True)
class DropEntry:
    """The entry is stale: the job ended, moved to another attempt, or was placed."""

    entry: QueueEntry


# -- stage 4: slots --


@dataclass(frozen=True)
class FreeJobSlot:
    user: str
    job_id: str


@dataclass(frozen=True)
class FreeInstanceSlot:
    user: str
    name: str


@dataclass(frozen=True)
class FreeStoppedSlot:
    user: str
    name: str


VmAction = (
    Recover
    | Release
    | FinishClosing
    | PriceCooling
    | EndCooling
    | LoseCooling
    | EndStopped
    | ForgetStopped
    | DeleteOrphan
)
JobAction = Accrue | Cancel | PlaceAgain | JudgeFinish | TendReplacement
QueueAction = RetryQuota | RetryPlacement | GiveUp | DropEntry
SlotAction = FreeJobSlot | FreeInstanceSlot | FreeStoppedSlot
Action = VmAction | JobAction | QueueAction | SlotAction
