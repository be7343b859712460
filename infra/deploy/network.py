"""The VMs' network: what ``spotline deploy`` makes so that a job's VMs can be
reached by the nodes of their own gang and by no one else's jobs.

The default network's ``default-allow-internal`` rule lets any VM of the
project reach any port of any other, and a gang's rendezvous (torch's
TCPStore, the Ray head) takes unauthenticated connections. So the VMs join a
network of spotline's own (``spotline.shared.domain.tenancy.NETWORK``), in auto
mode (a subnet in every region), where Compute Engine's implied rules deny all
ingress, and one firewall rule per VM identity lets in only the VMs that run
as the same account:

- in the per-user mode, one rule per user: source and target are that user's
  VM account, so a user's VMs accept connections from that user's VMs alone;
- in the shared-topics mode, one rule for the shared VM account: every
  spotline VM reaches every other (SECURITY.md says so), none else does.

Why accounts and not a rule per job: a job's nodes talk on ports chosen at run
time (NCCL, Ray's workers), so the rule must open every port between them,
and a rule per job would have to be made and removed by the functions as gangs
come and go, which needs Compute Engine's security-admin rights on the
project, far more than placing VMs. A user's jobs already share that user's
storage and secrets, so the user is the unit the network separates, as the
bucket and Secret Manager do. Nothing outside the network may connect in
(an account-based source matches VMs only, never an external address).

Pure: the typed ``compute_v1`` bodies, compared with what exists; the
deployer and the destroyer send them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotline.infra.deploy import iam
from spotline.shared.domain import tenancy

if TYPE_CHECKING:
    from google.cloud import compute_v1

NETWORK = tenancy.NETWORK
RULE_PREFIX = "spotline-peers"
# Below the implied rules (65535) and the default 1000, above nothing of spotline's.
PRIORITY = 1000
# Between a gang's nodes: the rendezvous port and NCCL's and Ray's own, chosen at run time.
PROTOCOLS = ("tcp", "udp", "icmp")


@dataclass(frozen=True)
class PeerRule:
    """VMs running as ``account`` accept connections from VMs running as it."""

    name: str
    account: str  # an email
    whose: str  # in words, for the description


def network_path(project: str) -> str:
    return f"projects/{project}/global/networks/{NETWORK}"


def peer_rules(config: iam.IamConfig) -> list[PeerRule]:
    """One rule per VM identity: each user's in the per-user mode, else the shared one."""
    if config.users:
        return [
            PeerRule(
                f"{RULE_PREFIX}-{tenancy.vm_account_id(user)}",
                tenancy.vm_account_email(user, config.project),
                f"{user}'s VMs",
            )
            for user in config.users
        ]
    return [PeerRule(RULE_PREFIX, config.vm_account, "spotline's VMs")]


def desired_network(config: iam.IamConfig) -> compute_v1.Network:
    from google.cloud import compute_v1

    return compute_v1.Network(
        name=NETWORK,
        description="spotline's VMs; a VM is reached by VMs of its own account only",
        # Auto mode: a subnet in every region, wherever a job's zones are.
        auto_create_subnetworks=True,
    )


def desired_firewall(config: iam.IamConfig, rule: PeerRule) -> compute_v1.Firewall:
    from google.cloud import compute_v1

    return compute_v1.Firewall(
        name=rule.name,
        description=f"{rule.whose} reach each other, and nothing else reaches them",
        network=network_path(config.project),
        direction="INGRESS",
        priority=PRIORITY,
        allowed=[compute_v1.Allowed(I_p_protocol=protocol) for protocol in PROTOCOLS],
        source_service_accounts=[rule.account],
        target_service_accounts=[rule.account],
    )


def firewall_differs(current: compute_v1.Firewall, desired: compute_v1.Firewall) -> list[str]:
    """The fields spotline sets that ``current`` does not hold as ``desired`` says."""
    return [
        field
        for field in (
            "network",
            "direction",
            "priority",
            "source_service_accounts",
            "target_service_accounts",
            "source_tags",
            "target_tags",
            "source_ranges",
            "disabled",
        )
        if _comparable(getattr(current, field)) != _comparable(getattr(desired, field))
    ] + (["allowed"] if _allowed(current) != _allowed(desired) else [])


def is_ours(firewall: compute_v1.Firewall, project: str) -> bool:
    """A peer rule of spotline's on its network (one left by a user since removed)."""
    on_ours = firewall.network.endswith(network_path(project))
    return on_ours and firewall.name.startswith(RULE_PREFIX)


def _comparable(value: object) -> object:
    if isinstance(value, str) and "/projects/" in value:
        return value[value.index("projects/") :]  # a full URL as the partial one
    if isinstance(value, str | int | bool):
        return value
    return sorted(value)  # type: ignore[call-overload]


def _allowed(firewall: compute_v1.Firewall) -> list[tuple[str, tuple[str, ...]]]:
    return sorted((a.I_p_protocol, tuple(sorted(a.ports))) for a in firewall.allowed)
