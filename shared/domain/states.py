"""Job and instance states, and the one table that says which moves are legal.

The names follow Aibro's and add what spot recovery needs. A job's
*substatus* drives the machine; its *status* is derived: the steps before
training read QUEUING on the first attempt and RECOVERING on later ones.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    QUEUING = "QUEUING"  # first attempt, waiting for or setting up a VM
    TRAINING = "TRAINING"  # the trainer runs, or returns its results
    RECOVERING = "RECOVERING"  # a later attempt, after a preemption, a stall or a restart
    COMPLETED = "COMPLETED"  # the trainer exited 0
    CANCELED = "CANCELED"  # a person, or a limit (wait_request_s, quota wait), ended it
    FAILED = "FAILED"  # the trainer failed, or spotline gave up: see `error`

    @classmethod
    def terminal(cls) -> frozenset[JobStatus]:
        return frozenset({cls.COMPLETED, cls.CANCELED, cls.FAILED})

    @classmethod
    def active(cls) -> frozenset[JobStatus]:
        return frozenset(set(cls) - cls.terminal())


class JobSubstatus(StrEnum):
    REQUESTING_SERVER = "REQUESTING_SERVER"  # asking Compute for a VM
    WAITING_FOR_CAPACITY = "WAITING_FOR_CAPACITY"  # every machine option failed; queued
    WAITING_FOR_QUOTA = "WAITING_FOR_QUOTA"  # over the user's quota; queued
    CONNECTING_SERVER = "CONNECTING_SERVER"  # VM created, agent not heard from yet
    GEARING_UP_ENV = "GEARING_UP_ENV"  # agent up, preparing drivers and framework
    SENDING_MODEL_AND_DATA = "SENDING_MODEL_AND_DATA"  # fetching code, data, checkpoint
    # pip installing the code's requirements.txt into the job's own venv
    INSTALLING_REQUIREMENTS = "INSTALLING_REQUIREMENTS"
    TRAINING = "TRAINING"  # trainer running
    # A gang lost one node: the others stopped at the shared step and wait for
    # its replacement (``spotline.shared.domain.node_replacement``).
    REPLACING_NODE = "REPLACING_NODE"
    RETURNING = "RETURNING"  # trainer done, outputs being uploaded
    PREEMPTED = "PREEMPTED"  # the Spot VM was taken away; a new attempt follows
    STALLED = "STALLED"  # the VM stopped sending heartbeats; a new attempt follows
    ERRORED = "ERRORED"  # the trainer exited non-zero; the failure policy restarts it
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    FAILED = "FAILED"

    @classmethod
    def endings(cls) -> frozenset[JobSubstatus]:
        return frozenset({cls.COMPLETED, cls.CANCELED, cls.FAILED})

    @classmethod
    def on_vm(cls) -> frozenset[JobSubstatus]:
        """Substatuses during which the job owns a live VM."""
        return frozenset(
            {
                cls.CONNECTING_SERVER,
                cls.GEARING_UP_ENV,
                cls.SENDING_MODEL_AND_DATA,
                cls.INSTALLING_REQUIREMENTS,
                cls.TRAINING,
                cls.REPLACING_NODE,
                cls.RETURNING,
            }
        )


S = JobSubstatus
# The steps of setting up on a VM, between its insert and its trainer's start.
SETTING_UP = frozenset(
    {S.CONNECTING_SERVER, S.GEARING_UP_ENV, S.SENDING_MODEL_AND_DATA, S.INSTALLING_REQUIREMENTS}
)
_GIVE_UP = {S.CANCELED, S.FAILED}
_VM_LOST = {S.PREEMPTED, S.STALLED}
# Ended on a VM, then a new attempt: a lost VM, or an error the failure policy restarts.
_RESTARTED = {*_VM_LOST, S.ERRORED}
# On a VM any later step may come next: events can be lost or arrive out of
# order (an epoch before "booted"), and a job may finish from any step.
_ON_VM_END = {S.COMPLETED, S.CANCELED, S.FAILED, *_RESTARTED}

# After the code is fetched: its requirements installed (when it has any), then training.
_FROM_SENDING = {S.INSTALLING_REQUIREMENTS, S.TRAINING, S.RETURNING, *_ON_VM_END}

# Waiting for the next attempt's VM, a job may still complete: the attempt
# before it finished just before its VM was lost, and the finish came after
# the loss was recorded (``spotline.shared.domain.late_finish``).
_ENDS_WAITING = {S.COMPLETED, *_GIVE_UP}

JOB_TRANSITIONS: dict[JobSubstatus, frozenset[JobSubstatus]] = {
    S.REQUESTING_SERVER: frozenset(
        {S.CONNECTING_SERVER, S.WAITING_FOR_CAPACITY, S.WAITING_FOR_QUOTA, *_ENDS_WAITING}
    ),
    S.WAITING_FOR_CAPACITY: frozenset({S.REQUESTING_SERVER, *_ENDS_WAITING}),
    S.WAITING_FOR_QUOTA: frozenset({S.REQUESTING_SERVER, *_ENDS_WAITING}),
    # A gang's node lost while setting up or training: the attempt stays, one
    # node is replaced (``spotline.shared.domain.node_replacement``).
    S.CONNECTING_SERVER: frozenset(
        {S.GEARING_UP_ENV, S.SENDING_MODEL_AND_DATA, S.REPLACING_NODE, *_FROM_SENDING}
    ),
    S.GEARING_UP_ENV: frozenset({S.SENDING_MODEL_AND_DATA, S.REPLACING_NODE, *_FROM_SENDING}),
    S.SENDING_MODEL_AND_DATA: frozenset({S.REPLACING_NODE, *_FROM_SENDING}),
    S.INSTALLING_REQUIREMENTS: frozenset({S.TRAINING, S.RETURNING, S.REPLACING_NODE, *_ON_VM_END}),
    S.TRAINING: frozenset({S.RETURNING, S.REPLACING_NODE, *_ON_VM_END}),
    # Once the gang regrouped: back to training, or to the step of setting up
    # it was lost in; any ending or loss as on a VM.
    S.REPLACING_NODE: frozenset({*SETTING_UP, S.TRAINING, S.RETURNING, *_ON_VM_END}),
    S.RETURNING: frozenset(_ON_VM_END),
    S.PREEMPTED: frozenset({S.REQUESTING_SERVER, S.WAITING_FOR_CAPACITY, *_GIVE_UP}),
    S.STALLED: frozenset({S.REQUESTING_SERVER, S.WAITING_FOR_CAPACITY, *_GIVE_UP}),
    S.ERRORED: frozenset({S.REQUESTING_SERVER, S.WAITING_FOR_CAPACITY, *_GIVE_UP}),
    S.COMPLETED: frozenset(),
    S.CANCELED: frozenset(),
    S.FAILED: frozenset(),
}

# The one way an ending is undone: a job FAILED by a limit that a loss of its
# attempt reached (max_preemptions, max_attempts) COMPLETES when that same
# attempt's trainer is then reported to have exited 0: the loss's report
# overtook the finish (``spotline.shared.domain.late_finish``). Apart from
# JOB_TRANSITIONS, where every ending stays final.
JOB_REVISIONS: dict[JobSubstatus, frozenset[JobSubstatus]] = {
    S.FAILED: frozenset({S.COMPLETED}),
}


def job_status_for(substatus: JobSubstatus, attempt: int) -> JobStatus:
    """The status a person reads for a substatus on a given attempt."""
    if substatus in (S.TRAINING, S.RETURNING):
        return JobStatus.TRAINING
    if substatus in {*_RESTARTED, S.REPLACING_NODE}:
        return JobStatus.RECOVERING
    if substatus in S.endings():
        return JobStatus(substatus.value)
    return JobStatus.QUEUING if attempt <= 1 else JobStatus.RECOVERING


class InstanceStatus(StrEnum):
    LAUNCHING = "LAUNCHING"  # created, booting and setting up
    EXECUTING = "EXECUTING"  # running a job
    COOLING = "COOLING"  # idle within the job's cooling period, claimable
    CLOSING = "CLOSING"  # being stopped or deleted
    CLOSED = "CLOSED"  # stopped, deleted or preempted

    @classmethod
    def live(cls) -> frozenset[InstanceStatus]:
        return frozenset({cls.LAUNCHING, cls.EXECUTING, cls.COOLING, cls.CLOSING})


class InstanceSubstatus(StrEnum):
    STOPPING = "STOPPING"  # shutting down, keeping the disk
    STOPPED = "STOPPED"
    TERMINATING = "TERMINATING"  # being deleted
    TERMINATED = "TERMINATED"
    PREEMPTED = "PREEMPTED"  # taken away by Compute Engine


St, Sub = InstanceStatus, InstanceSubstatus
# Which substatuses each instance status may carry (None: no substatus).
INSTANCE_SUBSTATUSES: dict[InstanceStatus, frozenset[InstanceSubstatus | None]] = {
    St.LAUNCHING: frozenset({None}),
    St.EXECUTING: frozenset({None}),
    St.COOLING: frozenset({None}),
    St.CLOSING: frozenset({Sub.STOPPING, Sub.TERMINATING}),
    St.CLOSED: frozenset({Sub.STOPPED, Sub.TERMINATED, Sub.PREEMPTED}),
}
INSTANCE_TRANSITIONS: dict[InstanceStatus, frozenset[InstanceStatus]] = {
    St.LAUNCHING: frozenset({St.EXECUTING, St.COOLING, St.CLOSING, St.CLOSED}),
    St.EXECUTING: frozenset({St.COOLING, St.CLOSING, St.CLOSED}),
    St.COOLING: frozenset({St.EXECUTING, St.CLOSING, St.CLOSED}),
    St.CLOSING: frozenset({St.CLOSED}),
    # Only a STOPPED instance leaves CLOSED: restarted for a new job, or deleted
    # (CLOSED/TERMINATED); see REOPENABLE.
    St.CLOSED: frozenset({St.LAUNCHING}),
}
# The CLOSED substatuses an instance may still move from.
REOPENABLE: frozenset[InstanceSubstatus] = frozenset({Sub.STOPPED})
