"""Payloads of the events the VM agent and users publish.

Every VM event names its job, the attempt it belongs to and the instance that
sent it, so a handler can ignore events of an older attempt.

Anyone who may publish to a topic can send anything: every field is bounded
(``spotline.shared.domain.bounds``), so that what validates can be stored and computed
with, and what does not is dropped with the field named.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)

from spotline.shared.domain.bounds import (
    MAX_EPOCHS,
    MAX_METRICS,
    Attempt,
    JobId,
    Step,
    Timestamp,
    Uri,
    VmName,
    Zone,
    key_problem,
)
from spotline.shared.domain.states import JobSubstatus

# An event token's length bound: secrets.token_urlsafe(32) is 43 characters.
MAX_TOKEN_CHARS = 128
# What the agent keeps of the trainer's output: its end, where the error is.
LOG_TAIL_CHARS = 8000
# The steps a VM reports entering. Only these: a heartbeat saying COMPLETED or
# CANCELED would otherwise end the job, with its VM and slot still held.
AGENT_PHASES = (
    JobSubstatus.GEARING_UP_ENV,
    JobSubstatus.SENDING_MODEL_AND_DATA,
    JobSubstatus.INSTALLING_REQUIREMENTS,
    JobSubstatus.TRAINING,
    JobSubstatus.RETURNING,
)


def _agent_phase(phase: JobSubstatus) -> JobSubstatus:
    if phase not in AGENT_PHASES:
        raise ValueError(f"{phase.value} is not a step a VM reports ({', '.join(AGENT_PHASES)})")
    return phase


AgentPhase = Annotated[JobSubstatus, AfterValidator(_agent_phase)]


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class VmEvent(_Event):
    job_id: JobId
    attempt: Attempt
    instance: VmName
    sent_at: Timestamp
    # The token handed to the attempt's VMs in their metadata
    # (``spotline.shared.domain.event_auth``): without it, the event is not taken.
    # Kept out of repr: it must never reach a log line.
    token: str = Field(
        default="", max_length=MAX_TOKEN_CHARS, pattern=r"^[-_a-zA-Z0-9]*$", repr=False
    )
    # When the agent entered each step so far. Events travel on different
    # subscriptions and arrive in any order; with these, whichever comes first
    # fills in the job's timeline with the VM's own times.
    phases: dict[AgentPhase, Timestamp] = Field(default_factory=dict)


class VmBooted(VmEvent):
    """spotline-vm-booted: the agent is up and has read its job."""

    zone: Zone = ""
    instance_id: str = Field(default="", max_length=64, pattern=r"^[-_a-zA-Z0-9]*$")


class Heartbeat(VmEvent):
    """spotline-epoch-done, kind=heartbeat: alive, and which step it is in."""

    kind: Literal["heartbeat"] = "heartbeat"
    phase: AgentPhase | None = None
    step: Step | None = None
    resumed_from_step: Step | None = None  # the trainer resumed from this step


class EpochDone(VmEvent):
    """spotline-epoch-done, kind=epoch: one epoch finished and checkpointed."""

    kind: Literal["epoch"] = "epoch"
    epoch: int = Field(ge=1, le=MAX_EPOCHS)
    epochs: int = Field(ge=1, le=MAX_EPOCHS)
    step: Step
    # A metric that is not a finite number (a diverged loss) is None: JSON has
    # no NaN (pydantic writes it as null), and None reads plainly in the console.
    metrics: dict[str, float | None] = Field(default_factory=dict, max_length=MAX_METRICS)
    checkpoint_uri: Uri | None = None

    @field_validator("metrics", mode="after")
    @classmethod
    def _finite(cls, metrics: dict[str, float | None]) -> dict[str, float | None]:
        for name in metrics:
            problem = key_problem(name)
            if problem is not None:
                raise ValueError(problem)
        return {k: v if v is not None and math.isfinite(v) else None for k, v in metrics.items()}

    @model_validator(mode="after")
    def _epoch_within(self) -> EpochDone:
        if self.epoch > self.epochs:
            raise ValueError(f"epoch: {self.epoch} is beyond epochs ({self.epochs})")
        return self


Progress = Annotated[Heartbeat | EpochDone, Field(discriminator="kind")]
progress_adapter: TypeAdapter[Heartbeat | EpochDone] = TypeAdapter(Progress)


class JobFinished(VmEvent):
    """spotline-job-finished: the trainer exited; 0 means the job completed."""

    # A death by signal N is 128+N (``exit_codes``); an older agent sent -N.
    exit_code: int = Field(ge=-255, le=255)
    log_tail: str = ""
    checkpoint_uri: Uri | None = None
    # The last epoch reported, again: it travels on another subscription and
    # may arrive after this event; with it here, a finished job always shows
    # its final progress and metrics.
    last_epoch: EpochDone | None = None
    # The trainer never started for a cause no new VM fixes (its code or data
    # location holds nothing, the data is larger than the disk): the job fails
    # on this VM, whatever its restarts on errors allow. The cause is log_tail.
    unrecoverable: bool = False
    # How many units (files, checkpoint folders) the agent's mirror of the
    # trainer's local folders holds in storage (checkpoint_mirror); None from
    # an agent before the mirror.
    mirrored_checkpoints: int | None = Field(default=None, ge=0)
    mirrored_outputs: int | None = Field(default=None, ge=0)

    @field_validator("log_tail", mode="after")
    @classmethod
    def _tail(cls, log_tail: str) -> str:
        return log_tail[-LOG_TAIL_CHARS:]


class SpotPreempted(VmEvent):
    """spotline-spot-preempted: the 30 s notice came; state saved at `step`.

    With ``gang_stop`` the sending node got no notice: another node of its gang
    did, and this node's trainer stopped with the gang (exit 143) after saving
    at ``step``. Not a loss by itself: the noticed node's report (or the log
    sink's, or the reaper finding that VM gone) records the preemption."""

    checkpoint_uri: Uri | None = None
    step: Step | None = None
    gang_stop: bool = False
    mirrored_checkpoints: int | None = Field(default=None, ge=0)  # as in JobFinished
    # The gang's node list generation the node ran in (``Assignment.generation``):
    # a late copy of its stop for an earlier loss is not its save for this
    # one, and an elastic gang's stop at a smaller size is told apart.
    generation: int | None = Field(default=None, ge=0)


class CancelRequest(_Event):
    """spotline-cancel: a person asks to stop a job."""

    job_id: JobId
    reason: str = Field(default="canceled by the user", max_length=500)


class ReaperTick(_Event):
    """spotline-reaper-tick: Cloud Scheduler's body; its content does not matter."""

    sent_at: Timestamp | None = None


class PreemptionNotice(_Event):
    """A preemption, whoever reported it: the agent (with its job, attempt,
    token and the state it saved) or a Cloud Logging sink on
    ``compute.instances.preempted`` (the VM's name and numeric id only)."""

    instance: VmName
    zone: Zone = ""
    instance_id: str = Field(default="", max_length=64, pattern=r"^[-_a-zA-Z0-9]*$")
    job_id: JobId | None = None
    attempt: Attempt | None = None
    token: str = Field(default="", repr=False)
    step: Step | None = None
    checkpoint_uri: Uri | None = None
    source: Literal["agent", "log-sink"] = "agent"
    gang_stop: bool = False  # the agent's: its node stopped for another's notice
    mirrored_checkpoints: int | None = None  # the agent's (SpotPreempted)
    generation: int | None = None  # the agent's (SpotPreempted)


PREEMPTED_METHOD = "compute.instances.preempted"


def parse_preemption(data: bytes) -> PreemptionNotice:
    """Either message shape on spotline-spot-preempted, as one notice.

    Raises:
        ValueError: neither a SpotPreempted event nor a preemption log entry
            (pydantic's ValidationError is one).
    """
    import json

    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as err:  # also: ints over 4300 digits
        raise ValueError(f"the message is not JSON: {err}") from err
    if not isinstance(raw, dict):
        raise ValueError("the message must be a JSON object")
    payload = raw.get("protoPayload")
    if isinstance(payload, dict):
        method = payload.get("methodName")
        if method != PREEMPTED_METHOD:
            raise ValueError(f"log entry for {method!r}, not {PREEMPTED_METHOD}")
        # resourceName: projects/P/zones/Z/instances/NAME
        parts = str(payload.get("resourceName", "")).split("/")
        if len(parts) < 6 or parts[-2] != "instances":
            raise ValueError(f"no instance in resourceName {payload.get('resourceName')!r}")
        # Cloud Logging's gce_instance resource names the VM's numeric id: a VM
        # re-created under the same name has another.
        resource = raw.get("resource")
        labels = resource.get("labels") if isinstance(resource, dict) else None
        instance_id = labels.get("instance_id", "") if isinstance(labels, dict) else ""
        return PreemptionNotice(
            instance=parts[-1], zone=parts[-3], instance_id=str(instance_id), source="log-sink"
        )
    event = SpotPreempted.model_validate(raw)
    return PreemptionNotice(
        instance=event.instance,
        job_id=event.job_id,
        attempt=event.attempt,
        token=event.token,
        step=event.step,
        checkpoint_uri=event.checkpoint_uri,
        gang_stop=event.gang_stop,
        mirrored_checkpoints=event.mirrored_checkpoints,
        generation=event.generation,
    )
