"""Payloads of the events the VM agent and users publish.

Every VM event names its job, the attempt it belongs to and the instance that
sent it, so a handler can ignore events of an older attempt.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from shared.domain.states import JobSubstatus


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class VmEvent(_Event):
    job_id: str
    attempt: int = Field(ge=1)
    instance: str
    sent_at: datetime
    # When the agent entered each step so far. Events travel on different
    # subscriptions and arrive in any order; with these, whichever comes first
    # fills in the job's timeline with the VM's own times.
    phases: dict[JobSubstatus, datetime] = Field(default_factory=dict)


class VmBooted(VmEvent):
    """spotline-vm-booted: the agent is up and has read its job."""

    zone: str = ""
    instance_id: str = ""


class Heartbeat(VmEvent):
    """spotline-epoch-done, kind=heartbeat: alive, and which step it is in."""

    kind: Literal["heartbeat"] = "heartbeat"
    phase: JobSubstatus | None = None
    step: int | None = None
    resumed_from_step: int | None = None  # the trainer resumed from this step


class EpochDone(VmEvent):
    """spotline-epoch-done, kind=epoch: one epoch finished and checkpointed."""

    kind: Literal["epoch"] = "epoch"
    epoch: int = Field(ge=1)
    epochs: int = Field(ge=1)
    step: int = Field(ge=0)
    metrics: dict[str, float] = Field(default_factory=dict)
    checkpoint_uri: str | None = None


Progress = Annotated[Heartbeat | EpochDone, Field(discriminator="kind")]
progress_adapter: TypeAdapter[Heartbeat | EpochDone] = TypeAdapter(Progress)


class JobFinished(VmEvent):
    """spotline-job-finished: the trainer exited; 0 means the job completed."""

    exit_code: int
    log_tail: str = ""
    checkpoint_uri: str | None = None
    # The last epoch reported, again: it travels on another subscription and
    # may arrive after this event; with it here, a finished job always shows
    # its final progress and metrics.
    last_epoch: EpochDone | None = None


class SpotPreempted(VmEvent):
    """spotline-spot-preempted: the 30 s notice came; state saved at `step`."""

    checkpoint_uri: str | None = None
    step: int | None = None


class CancelRequest(_Event):
    """spotline-cancel: a person asks to stop a job."""

    job_id: str
    reason: str = "canceled by the user"


class ReaperTick(_Event):
    """spotline-reaper-tick: Cloud Scheduler's body; its content does not matter."""

    sent_at: datetime | None = None


class PreemptionNotice(_Event):
    """A preemption, whoever reported it: the agent (with the state it saved)
    or a Cloud Logging sink on ``compute.instances.preempted`` (VM name only)."""

    instance: str
    zone: str = ""
    attempt: int | None = None
    step: int | None = None
    checkpoint_uri: str | None = None
    source: Literal["agent", "log-sink"] = "agent"


PREEMPTED_METHOD = "compute.instances.preempted"


def parse_preemption(data: bytes) -> PreemptionNotice:
    """Either message shape on spotline-spot-preempted, as one notice.

    Raises:
        ValueError: neither a SpotPreempted event nor a preemption log entry.
    """
    import json

    raw = json.loads(data)
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
        return PreemptionNotice(instance=parts[-1], zone=parts[-3], source="log-sink")
    event = SpotPreempted.model_validate(raw)
    return PreemptionNotice(
        instance=event.instance,
        attempt=event.attempt,
        step=event.step,
        checkpoint_uri=event.checkpoint_uri,
    )
