"""Where a job's VM goes: machine options in order, deterministic names.

Pure code: the submit function and the reaper walk these options and call the
compute port themselves.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

from spotline.shared.contract.assignment import Assignment
from spotline.shared.domain.catalog import Machine
from spotline.shared.domain.documents import InstanceDoc
from spotline.shared.domain.errors import Unplaceable
from spotline.shared.domain.secret_env import reads_secrets
from spotline.shared.domain.vms import (
    EVENT_TOKEN_METADATA_KEY,
    JOB_METADATA_KEY,
    MANAGED_LABEL,
    RESTORE_METADATA_KEY,
    Accelerator,
    GangRequest,
    Provisioning,
    Vm,
    VmRequest,
    VmState,
)

ON_DEMAND_SUFFIX = ".od"
# Compute Engine runs these metadata values as scripts. They are constants that
# call the image's static scripts: no user string is ever pasted into a script.
BOOT_SCRIPTS = {
    "startup-script": "#!/bin/bash\nexec /opt/spotline/scripts/startup.sh\n",
    "shutdown-script": "#!/bin/bash\nexec /opt/spotline/scripts/shutdown.sh\n",
}
_VM_NAME = re.compile(r"^sl-(?P<job>.+)-a(?P<attempt>\d+)(?:-n\d+(?:-g\d+(?:-\d+)?)?)?$")
# A fixed namespace, so the same job attempt always yields the same requestId.
_REQUEST_NAMESPACE = uuid.UUID("6f1b3a52-5d0e-4c1a-9a57-0b7f3f2d8e11")


@dataclass(frozen=True)
class Option:
    """One thing to try: a machine, Spot or on demand, in one zone."""

    machine: Machine
    provisioning: Provisioning
    zone: str

    @property
    def machine_id(self) -> str:
        suffix = ON_DEMAND_SUFFIX if self.provisioning == Provisioning.STANDARD else ""
        return self.machine.machine_id + suffix

    @property
    def price_per_hour(self) -> float:
        if self.provisioning == Provisioning.SPOT:
            return self.machine.spot_usd_per_hour
        return self.machine.on_demand_usd_per_hour


def parse_machine_id(machine_id: str) -> tuple[str, Provisioning]:
    """``"g2-standard-4"`` -> Spot, ``"g2-standard-4.od"`` -> on demand."""
    if machine_id.endswith(ON_DEMAND_SUFFIX):
        return machine_id.removesuffix(ON_DEMAND_SUFFIX), Provisioning.STANDARD
    return machine_id, Provisioning.SPOT


def effective_machine_ids(
    machine_ids: list[str], avoid: list[str], on_demand_fallback: bool
) -> list[str]:
    """The user's machine ids less those to avoid after repeated preemptions;
    with ``on_demand_fallback`` an avoided Spot id gives way to its ``.od`` twin.
    When that would leave nothing, the user's list stands: better to try again
    than to give up."""
    chosen: list[str] = []
    for machine_id in machine_ids:
        if machine_id not in avoid:
            chosen.append(machine_id)
        elif on_demand_fallback and not machine_id.endswith(ON_DEMAND_SUFFIX):
            chosen.append(machine_id + ON_DEMAND_SUFFIX)
    unique = list(dict.fromkeys(chosen))
    return unique or list(machine_ids)


def options(
    machine_ids: list[str], zones: list[str] | tuple[str, ...], catalog: dict[str, Machine]
) -> Iterator[Option]:
    """Each machine id in the given order, each across the allowed zones.

    Raises:
        Unplaceable: a machine id is not in the catalog (submissions are
            checked, but the catalog may have lost it since), or no zones.
    """
    if not zones:
        raise Unplaceable("no zones to place the job in: set 'zones' or SPOTLINE_ZONES")
    for machine_id in machine_ids:
        name, provisioning = parse_machine_id(machine_id)
        machine = catalog.get(name)
        if machine is None:
            known = ", ".join(sorted(catalog))
            raise Unplaceable(f"machine_ids: {machine_id!r} is not in the catalog ({known})")
        for zone in zones:
            yield Option(machine=machine, provisioning=provisioning, zone=zone)


def refusal_summary(refused: list[tuple[str, str]]) -> str:
    """Options refused for good, as ``(where, why)``: each reason once, with
    the options it refused (a missing image refuses them all alike)."""
    by_reason: dict[str, list[str]] = {}
    for where, why in refused:
        by_reason.setdefault(why, []).append(where)
    return "; ".join(f"{why} ({', '.join(where)})" for why, where in by_reason.items())


def vm_name(job_id: str, attempt: int, rank: int | None = None) -> str:
    """Deterministic per attempt (and node): a redelivered submit finds the same VM."""
    base = f"sl-{job_id}-a{attempt}"
    return base if rank is None else f"{base}-n{rank}"


def replacement_name(job_id: str, attempt: int, rank: int, generation: int, again: int = 0) -> str:
    """The VM that replaces a gang's lost node of ``rank``: the node's name
    with the gang's generation, so each replacement's name is new (a name
    Compute Engine may still hold for the lost VM is never asked for again).
    ``again``: how many replacements of this loss were lost before joining
    (an elastic gang's, ``gang_resize``), each one's name new too."""
    name = f"{vm_name(job_id, attempt, rank)}-g{generation}"
    return f"{name}-{again}" if again else name


def vm_attempt(name: str) -> tuple[str, int] | None:
    """The job id and attempt a VM name was made for (``vm_name`` backwards);
    None for a name spotline did not make."""
    found = _VM_NAME.match(name)
    return (found["job"], int(found["attempt"])) if found else None


def node_names(job_id: str, attempt: int, nodes: int) -> list[str]:
    """The attempt's VM names, index = rank; a single node keeps the plain name."""
    if nodes == 1:
        return [vm_name(job_id, attempt)]
    return [vm_name(job_id, attempt, rank) for rank in range(nodes)]


def request_id(job_id: str, attempt: int, try_key: str = "") -> str:
    """GCE requestId of one insert try of the attempt.

    Compute Engine answers a repeated requestId with the first call's operation,
    a failed one included (a capacity error), and creates nothing. So each try
    (``try_key``: the placement pass and the option it tries) has an id of its
    own, and the same try, redelivered, repeats it.
    """
    key = f"{job_id}/{attempt}" + (f"/{try_key}" if try_key else "")
    return str(uuid.uuid5(_REQUEST_NAMESPACE, key))


def vm_labels(job_id: str, attempt: int, user: str) -> dict[str, str]:
    """Labels that find a job's VMs; values are lowercase letters, digits, - and _."""
    return {
        MANAGED_LABEL: "true",
        "spotline-job": job_id,
        "spotline-attempt": str(attempt),
        "spotline-user": user,
    }


def option_labels(option: Option) -> dict[str, str]:
    """Labels that let a VM found by name tell which option created it."""
    return {
        "spotline-machine": option.machine.machine_id,
        "spotline-provisioning": option.provisioning.value.lower(),
    }


def option_of(labels: dict[str, str], zone: str, catalog: dict[str, Machine]) -> Option | None:
    """The option a VM was created with, read back from its labels."""
    machine = catalog.get(labels.get("spotline-machine", ""))
    provisioning = labels.get("spotline-provisioning", "").upper()
    if machine is None or provisioning not in Provisioning.__members__:
        return None
    return Option(machine=machine, provisioning=Provisioning(provisioning), zone=zone)


def build_gang_request(
    option: Option,
    assignment: Assignment,
    image: str,
    user: str,
    region: str,
    zones: list[str] | tuple[str, ...],
    service_account: str | None = None,
    placement: int = 0,
    event_token: str = "",
    restore_gate: str | None = None,
) -> GangRequest:
    """The nodes of a multi-node attempt: one bulk insert, all in one zone.

    The nodes differ in their names only (a bulk insert gives every instance
    the same properties, the attempt's event token included); a node's rank
    is its name's ``-n{rank}`` suffix. ``placement`` tells the job's placement
    passes apart (see ``request_id``).
    """
    base = build_vm_request(
        option, assignment, image, user, service_account,
        event_token=event_token, restore_gate=restore_gate,
    )  # fmt: skip
    # The attempt's tag, the name of the rule that lets its nodes, and them
    # alone, reach each other (``spotline.shared.domain.gang_network.gang_tag``).
    tag = vm_name(assignment.job_id, assignment.attempt)
    nodes = tuple(replace(base, name=name, network_tag=tag) for name in assignment.nodes)
    return GangRequest(
        nodes=nodes,
        region=region,
        zones=tuple(zones),
        request_id=request_id(
            assignment.job_id,
            assignment.attempt,
            f"{placement}/{option.machine.machine_id}/{','.join(zones)}",
        ),
    )


def build_vm_request(
    option: Option,
    assignment: Assignment,
    image: str,
    user: str,
    service_account: str | None = None,
    placement: int = 0,
    event_token: str = "",
    restore_gate: str | None = None,
) -> VmRequest:
    """The VM request for one attempt of a job on one option; ``placement``
    tells the job's placement passes apart (see ``request_id``).

    ``event_token`` goes in a metadata item of its own, not in the assignment
    (which is printed and logged): see ``spotline.shared.domain.event_auth``.
    ``restore_gate``: a VM of an earlier attempt may still be saving, so the
    trainer waits for the gate to open (its value:
    ``spotline.shared.domain.restore_gate.gate_value``)."""
    machine = option.machine
    accelerators: tuple[Accelerator, ...] = ()
    if machine.attaches_gpus and machine.gpu_type:
        accelerators = (Accelerator(type=machine.gpu_type, count=machine.gpu_count),)
    return VmRequest(
        name=vm_name(assignment.job_id, assignment.attempt),
        zone=option.zone,
        machine_type=machine.machine_type,
        provisioning=option.provisioning,
        request_id=request_id(
            assignment.job_id,
            assignment.attempt,
            f"{placement}/{option.machine.machine_id}/{option.zone}",
        ),
        image=image,
        labels=vm_labels(assignment.job_id, assignment.attempt, user) | option_labels(option),
        metadata={
            **BOOT_SCRIPTS,
            JOB_METADATA_KEY: assignment.model_copy(
                update={"gpus": machine.gpu_count}
            ).model_dump_json(),
            **({EVENT_TOKEN_METADATA_KEY: event_token} if event_token else {}),
            **({RESTORE_METADATA_KEY: restore_gate} if restore_gate else {}),
        },
        accelerators=accelerators,
        service_account=service_account,
        reads_secrets=reads_secrets(assignment.spec.env),
    )


def held_vm(instance: InstanceDoc, catalog: dict[str, Machine]) -> tuple[Vm, Option]:
    """A VM spotline already holds (cooling, or stopped and restarted), as a
    placement answers it."""
    name, provisioning = parse_machine_id(instance.machine_id)
    option = Option(machine=catalog[name], provisioning=provisioning, zone=instance.zone)
    vm = Vm(
        name=instance.name,
        zone=instance.zone,
        state=VmState.RUNNING,
        labels={},
        machine_type=instance.machine_type,
        id=instance.instance_id or "",
    )
    return vm, option
