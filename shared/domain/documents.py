"""The Firestore documents, as pydantic models.

Fields a person reads in the Firestore console stay plain: status words,
``"7/15"`` progress, dollars as numbers, timestamps as Firestore timestamps.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from spotline.shared.contract.events import JobFinished
from spotline.shared.domain.job_events import JobEvent
from spotline.shared.domain.recording import Record
from spotline.shared.domain.spec import JobSpec
from spotline.shared.domain.states import InstanceStatus, InstanceSubstatus, JobStatus, JobSubstatus
from spotline.shared.domain.vms import Provisioning


class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HistoryEntry(_Doc):
    """One line of a job's or an instance's timeline."""

    at: datetime
    status: str
    substatus: str | None = None
    attempt: int | None = None
    note: str = ""


class ReplacedNode(BaseModel):
    """A gang's node replaced within its attempt (``node_replacement``): both
    VMs' names and ids, so that each one's logs can be found after it is gone."""

    rank: int
    lost: str  # the lost VM's name
    lost_instance_id: str | None = None
    replacement: str  # the VM that took its rank
    instance_id: str | None = None  # the replacement's Compute Engine id
    at: datetime  # when the replacement was inserted


class AttemptRecord(_Doc):
    """One VM's part in a job: where it ran and how it ended."""

    attempt: int
    instance: str
    zone: str
    machine_id: str
    started_at: datetime
    ended_at: datetime | None = None
    outcome: str | None = None  # completed, failed, preempted, stalled, canceled
    resumed_from_step: int | None = None  # where the trainer picked up
    checkpoint_step: int | None = None  # the step saved when the VM went away
    instance_id: str | None = None  # Compute Engine's numeric id: logs outlive the VM
    logs_query: str | None = None  # for Logs Explorer / `gcloud logging read`
    price_per_hour: float = 0.0  # what the VM cost (Spot or on demand)
    on_demand_price_per_hour: float = 0.0  # what the same VM costs on demand
    nodes: int = 1  # VMs in the attempt, each at price_per_hour
    node_names: list[str] = Field(default_factory=list)  # a gang's VMs, by rank
    node_ids: list[str] = Field(default_factory=list)  # their Compute Engine ids ("": unknown)
    replaced_nodes: list[ReplacedNode] = Field(default_factory=list)  # in the order replaced
    cost_usd: float = 0.0  # up to ended_at, or up to the last sweep while it runs
    on_demand_cost_usd: float = 0.0


class HeldFinish(BaseModel):
    """A gang node's JobFinished with a non-zero exit, held for the notice
    window before it is judged (``spotline.shared.domain.gang_finish``)."""

    event: JobFinished  # without its token: a token is never stored
    since: datetime  # when it was heard: judged once the window has passed


class PendingNode(BaseModel):
    """Another lost node of a gang being replaced at the same time
    (``NodeReplacement.more``): the fields of ``NodeReplacement`` its own."""

    rank: int
    lost: str
    replacement: str
    booted: bool = False
    refused_at: datetime | None = None
    refusals: int = 0
    lost_replacements: int = 0
    first_lost: str | None = None


class NodeReplacement(BaseModel):
    """A gang's lost node being replaced within its attempt
    (``spotline.shared.domain.node_replacement``)."""

    rank: int  # the lost node's rank, which the replacement takes
    lost: str  # the lost VM's name
    replacement: str  # the new VM's name (``placement.replacement_name``)
    since: datetime  # when the loss was recorded: the bound counts from here
    booted: bool = False  # the replacement's agent is up
    saved: bool = False  # node 0's save at the shared step is complete
    # The gang never trained when the node was lost (no node had reported
    # training, or the lost node's trainer never started): nothing to save;
    # the job's substatus then, which it goes back to once regrouped. None:
    # it was training.
    setting_up: JobSubstatus | None = None
    # An elastic gang (``min_nodes``, ``spotline.shared.domain.gang_resize``):
    # the nodes training on at the smaller size, by rank, once it shrank
    # (empty: the gang waits; the nodes left, waiting below ``min_nodes``
    # for every replacement), and whether it was asked to stop to grow back.
    shrunk: list[str] = Field(default_factory=list)
    grow_asked: bool = False
    # Replacements lost before they joined, each replaced in turn (its name new).
    lost_replacements: int = 0
    # The node lost at this rank that trained with the gang, once its
    # replacements were lost too (``lost`` then names the latest): a lost
    # node 0's save is its. None: ``lost`` is it, or (a record made before
    # this was kept) not known.
    first_lost: str | None = None
    # Other nodes lost before the gang regrouped, each replaced too
    # (``further_losses``, ``gang_resize.loses_again``); the gang regroups,
    # or grows back, once all are up.
    more: list[PendingNode] = Field(default_factory=list)
    # The generation the waiting gang stopped at (its nodes' stop reports
    # carry it) once a further loss moved ``JobDoc.gang_generation`` on;
    # None: the one before it.
    stopped_generation: int | None = None
    # An elastic smaller gang's head (its rank 0, which saves), lost at the
    # stop the gang waits on (``gang_resize.lost_again``): its own report
    # after saving, or its notice's end, completes that save.
    lost_head: str | None = None
    # Lost after the gang regrouped, heard with no generation (the log
    # sink's report, the reaper's sight of it gone), no step of the gang
    # heard since: whether it rejoined is not known. Had it, the gang's
    # ranks stopped with it within its notice, node 0 saving; no stop heard
    # by the notice's end, the gang had not stepped since, and the save it
    # regrouped from stands (``node_replacement.save_complete``).
    maybe_behind: bool = False
    # When the replacement's insert was last refused for capacity (the
    # reaper asks again REINSERT_AFTER_S later, not at every sweep), and how
    # many times: each try is a new request (Compute Engine answers a
    # requestId it has seen with that request's operation, refused again).
    refused_at: datetime | None = None
    refusals: int = 0


class TellingRegroup(BaseModel):
    """A gang's regroup written on its job, its nodes not all told yet
    (``spotline.shared.domain.node_replacement.recorded``)."""

    generation: int
    nodes: list[str]  # by rank
    shrink: bool = False  # an elastic gang's survivors alone, not the whole gang


class JobDoc(_Doc):
    """jobs/{job_id}"""

    job_id: str
    user: str
    description: str = ""
    spec: JobSpec
    status: JobStatus = JobStatus.QUEUING
    substatus: JobSubstatus = JobSubstatus.REQUESTING_SERVER
    attempt: int = 1
    preemptions: int = 0
    # The failure policy's restarts (``spotline.shared.domain.failure_policy``): those
    # spent of max_restarts_on_errors, and those of restart_on_exit_codes.
    restarts_on_errors: int = 0
    restarts_on_exit_codes: int = 0
    instance: str | None = None  # the current attempt's VM name (node 0 of a gang)
    nodes: list[str] = Field(default_factory=list)  # a multi-node attempt's VMs, by rank
    zone: str | None = None
    machine_id: str | None = None
    progress: str = "0/0"  # "epoch/epochs", for the console
    epoch: int = 0
    epochs: int = 0
    step: int = 0
    metrics: dict[str, float | None] = Field(default_factory=dict)  # None: not finite
    checkpoint_uri: str | None = None
    cost_usd: float = 0.0  # every attempt's VM time at its price, cooling included
    on_demand_cost_usd: float = 0.0  # the same VM time at on-demand prices
    savings_percent: float | None = None
    cooling_cost_usd: float = 0.0  # holding its VM idle afterwards, for the next job
    # When ``cost_usd`` was last priced (``lifecycle.accrue``): the reaper
    # prices a running job again once this is ``cost_refresh_s`` old.
    cost_as_of: datetime | None = None
    # The cooling period it left, by instance name: set, never added to, so a
    # redelivered or repeated charge changes nothing.
    cooling_charges: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    # A job that never saved says so, with what to do (``nothing_saved``).
    nothing_saved: str | None = None
    message_id: str | None = None
    created_at: datetime
    updated_at: datetime
    history: list[HistoryEntry] = Field(default_factory=list)
    # Seconds in each timeline phase that has ended, over every attempt
    # (``spotline.shared.domain.timeline``): the console's view of where the time went.
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    attempts: list[AttemptRecord] = Field(default_factory=list)
    # VMs made for it that no attempt recorded (it ended while one was being
    # placed), each priced from its creation to its delete, by name, once
    # (``spotline.shared.domain.unrecorded_vms``); in cost_usd with the attempts.
    unrecorded_vms: list[AttemptRecord] = Field(default_factory=list)
    avoid_machine_ids: list[str] = Field(default_factory=list)  # after repeated preemptions
    # A gang node's non-zero exit, not yet judged: it may be another node's
    # preemption seen from here (``spotline.shared.domain.gang_finish``).
    held_finish: HeldFinish | None = None
    # A gang node being replaced, the others waiting (``node_replacement``);
    # how many times the current attempt's gang regrouped (its node list's
    # generation); the nodes that stopped with their gang since the last regroup.
    replacing: NodeReplacement | None = None
    gang_generation: int = 0
    gang_stops: list[str] = Field(default_factory=list)
    # An epoch of one of the gang's nodes, past its attempt's newest save,
    # heard since it was placed or last regrouped: a step takes every
    # node's ranks, so each of them trained (``node_replacement.epoch_heard``).
    gang_stepped: bool = False
    # The gang's last regroup, recorded and not yet told to every node.
    telling: TellingRegroup | None = None
    # An elastic gang's changes of size (each a restart from the last save).
    resizes: int = 0
    record: Record | None = None  # a recorded job's snapshot (``spotline.shared.domain.recording``)
    # SHA-256 of the event tokens handed to the VMs of an attempt, by attempt
    # (a string: Firestore's map keys), the current and previous attempts
    # only; never the tokens (``spotline.shared.domain.event_auth``).
    event_token_hashes: dict[str, list[str]] = Field(default_factory=dict)
    # The state-change notifications (``spotline.shared.domain.job_events``): the last
    # sequence number given, and the outbox of events not yet published.
    event_sequence: int = 0
    pending_events: list[JobEvent] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def outbox(self) -> Literal["pending", "empty"]:
        """Stored with the job, so the reaper finds the jobs whose events a
        crash left unpublished with one equality query."""
        return "pending" if self.pending_events else "empty"


class EpochDoc(_Doc):
    """jobs/{job_id}/epochs/{attempt:03d}-{epoch:05d} (``epoch_key``)"""

    epoch: int
    epochs: int
    attempt: int
    step: int
    metrics: dict[str, float | None] = Field(default_factory=dict)  # None: not finite
    checkpoint_uri: str | None = None
    instance: str
    at: datetime


def epoch_key(epoch: EpochDoc) -> str:
    """An epoch's record is one per attempt: the next attempt, resumed from a
    save made inside an epoch, reports that epoch again, and must not overwrite
    what the attempt before recorded of it."""
    return f"{epoch.attempt:03d}-{epoch.epoch:05d}"


def epoch_order(epoch: EpochDoc) -> tuple[int, int]:
    """Records in the order they were made: by attempt, then epoch."""
    return epoch.attempt, epoch.epoch


class InstanceDoc(_Doc):
    """instances/{name}"""

    name: str
    job_id: str
    user: str
    attempt: int
    machine_id: str
    machine_type: str
    zone: str
    provisioning: Provisioning
    status: InstanceStatus = InstanceStatus.LAUNCHING
    substatus: InstanceSubstatus | None = None
    instance_id: str | None = None
    price_per_hour: float = 0.0  # in force now: escalated while a Spot VM cools
    base_price_per_hour: float = 0.0  # its own rate, Spot or on demand
    on_demand_price_per_hour: float = 0.0
    cost_usd: float = 0.0  # closed segments (running, cooling) so far
    segment_started_at: datetime | None = None  # the current segment; None: created_at
    cooling_since: datetime | None = None
    cooling_until: datetime | None = None
    cooling_cost_usd: float = 0.0  # the current cooling period, so far
    cooled_for_job: str | None = None  # whose cooling period the last claim closed
    stopped_until: datetime | None = None  # CLOSED/STOPPED: restartable until then
    # Created with the scope to read Secret Manager (its job had sm:// env
    # values): only such a VM is reused for a job that has some.
    reads_secrets: bool = False
    created_at: datetime
    # Compute Engine's creationTimestamp of a VM the placement made (None:
    # not read back, or a reused VM): where an unrecorded VM's charge begins.
    vm_created_at: datetime | None = None
    booted_at: datetime | None = None
    last_heartbeat_at: datetime | None = None
    closed_at: datetime | None = None
    updated_at: datetime
    history: list[HistoryEntry] = Field(default_factory=list)


# "errored": the failure policy restarts the job (``spotline.shared.domain.failure_policy``).
QueueReason = Literal["new", "preempted", "stalled", "errored", "no-capacity", "quota"]


class QueueEntry(_Doc):
    """queue/{job_id}: a job waiting for a VM; the reaper drains these."""

    job_id: str
    reason: QueueReason
    attempt: int
    not_before: datetime
    enqueued_at: datetime
    tries: int = 0
    last_error: str | None = None
    user: str | None = None
    # When this attempt began to wait for capacity: its machine options'
    # windows count from here (``spotline.shared.domain.option_waiting``).
    waiting_since: datetime | None = None


class UserDoc(_Doc):
    """users/{user}: what holds the user's quota slots.

    Lists of ids, not counters: taking a slot twice (a redelivered event) or
    freeing one twice changes nothing, and each list is bounded by its quota.
    """

    user: str
    active_jobs: list[str] = Field(default_factory=list)
    active_instances: list[str] = Field(default_factory=list)
    stopped_instances: list[str] = Field(default_factory=list)
    updated_at: datetime | None = None


class Rejection(_Doc):
    """rejected/{message_id}: a submit message that was not a valid job."""

    message_id: str
    reason: str
    payload: str  # the first KB of what was published, for the person who sent it
    at: datetime


def to_firestore(model: BaseModel) -> dict[str, Any]:
    """The model as Firestore values: enums as their words, datetimes kept."""
    return _plain(model.model_dump(mode="python"))


def _plain(value: Any) -> Any:
    from enum import Enum

    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
