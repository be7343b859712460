"""What spotline asks of a VM provider and what it gets back: pure value types.

Built by pure placement code (``spotline.shared.domain.placement``), sent by a compute
adapter (``spotline.shared.adapters.gce_compute``) through the port
(``spotline.shared.ports.compute``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

# Metadata key under which a VM finds its job (a JSON document).
JOB_METADATA_KEY = "spotline-job"
# Metadata key of the token the VM's events carry (``spotline.shared.domain.event_auth``):
# apart from the assignment, which gets printed and logged.
EVENT_TOKEN_METADATA_KEY = "spotline-event-token"
# Metadata key of the restore gate (``spotline.shared.domain.restore_gate``): a VM
# made while the lost attempt's VMs may still save waits for RESTORE_GO before
# its trainer starts, at most RESTORE_WAIT_S: a deleted VM's guest shutdown
# (Compute Engine gives it up to 90 s, a preempted one 30 s) and a margin for
# the delete to be sent, retried and seen.
RESTORE_METADATA_KEY = "spotline-restore"
RESTORE_WAIT = "wait"
RESTORE_UNTIL = "-until-"  # "wait-until-UNIX_TIME": the agent waits no later
RESTORE_GO = "go"
RESTORE_WAIT_S = 180.0
# Metadata key of a gang's regroup (``spotline.shared.domain.node_replacement``):
# the node list after a lost node was replaced (JSON: ``Regroup``). A node
# whose ranks stopped with its gang waits for a generation newer than its own,
# then restarts its ranks with it.
REGROUP_METADATA_KEY = "spotline-regroup"
# An elastic gang training at a smaller size (``gang_resize``): the
# generation asked to stop, so that the gang grows back. A node whose
# assignment is of that generation stops its ranks as on a peer's notice.
GANG_STOP_METADATA_KEY = "spotline-gang-stop"
# Labels every spotline VM carries, so the reaper can find orphans.
MANAGED_LABEL = "spotline"


class Provisioning(StrEnum):
    SPOT = "SPOT"  # preemptible, 60-91 % cheaper, 30 s notice
    STANDARD = "STANDARD"  # on demand


class VmState(StrEnum):
    """Compute Engine instance states, as the API spells them (``Instance.status``
    in the compute v1 discovery document), and one for a status it adds later."""

    PROVISIONING = "PROVISIONING"  # resources are being allocated
    STAGING = "STAGING"  # being prepared for its first boot
    PENDING = "PENDING"  # waiting for capacity or for a reservation to start
    RUNNING = "RUNNING"
    REPAIRING = "REPAIRING"  # its host failed: it comes back on another
    PENDING_STOP = "PENDING_STOP"  # a stop asked for, not yet begun
    STOPPING = "STOPPING"  # being stopped, or deleted
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"  # its memory saved: resumable, not running
    DEPROVISIONING = "DEPROVISIONING"  # being torn down: stopped or deleted soon
    STOPPED = "STOPPED"
    TERMINATED = "TERMINATED"  # stopped, or preempted: the disk is still there
    # A status this version of spotline does not know: the VM exists (it was
    # listed or read), and is taken to be not running.
    UNKNOWN = "UNKNOWN"

    @classmethod
    def going(cls) -> frozenset[VmState]:
        """On its way down already: another delete or stop adds nothing."""
        return frozenset({cls.PENDING_STOP, cls.STOPPING, cls.SUSPENDING, cls.DEPROVISIONING})


@dataclass(frozen=True)
class Accelerator:
    type: str  # e.g. "nvidia-tesla-t4"
    count: int


@dataclass(frozen=True)
class VmRequest:
    """Everything needed to create one VM; built by pure code, sent by an adapter."""

    name: str
    zone: str
    machine_type: str  # e.g. "n1-standard-8"
    provisioning: Provisioning
    request_id: str  # GCE requestId: the same attempt never creates two VMs
    image: str  # image or image family URL
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    accelerators: tuple[Accelerator, ...] = ()
    disk_gb: int = 100
    service_account: str | None = None
    # The job names Secret Manager references (secret_env): its VM's token
    # needs the cloud-platform scope, Secret Manager having no narrower one.
    reads_secrets: bool = False
    # The network tag of a gang's nodes, which its firewall rule lets reach
    # each other (``spotline.shared.domain.gang_network``); a single VM has none.
    network_tag: str | None = None


@dataclass(frozen=True)
class GangRequest:
    """Several identical VMs that must run together in one zone (a multi-node
    job): all are created, or none.

    ``nodes`` share everything but their names; their ``zone`` fields are
    ignored: the provider picks one of ``zones`` that can hold them all.
    """

    nodes: tuple[VmRequest, ...]
    region: str
    zones: tuple[str, ...]
    request_id: str  # one id for the whole gang: a retried bulk insert is a no-op


@dataclass(frozen=True)
class Vm:
    name: str
    zone: str
    state: VmState
    labels: dict[str, str]
    machine_type: str = ""
    id: str = ""
    # Compute Engine's creationTimestamp; None where the provider did not say
    # (a VM reported from its request alone). Billing starts about here.
    created_at: datetime | None = None


@dataclass(frozen=True)
class Quota:
    """One regional allocation quota, as Compute Engine's ``regions.get`` lists it."""

    metric: str  # e.g. "CPUS", "NVIDIA_L4_GPUS", "PREEMPTIBLE_NVIDIA_L4_GPUS"
    limit: float
    usage: float
