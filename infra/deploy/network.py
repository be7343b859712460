"""The VMs' network: what ``spotline deploy`` makes so that a VM can be reached
by the nodes of its own gang and by nothing else.

The default network's ``default-allow-internal`` rule lets any VM of the
project reach any port of any other, and a gang's rendezvous (torch's
TCPStore, the Ray head) takes unauthenticated connections. So the VMs join a
network of spotline's own (``spotline.shared.domain.tenancy.NETWORK``), in auto
mode (a subnet in every region), where Compute Engine's implied rules deny all
ingress. Deploy makes no rule on it: the functions make one per gang attempt,
for its nodes alone, before its VMs are inserted, and delete it when the
attempt is over (``spotline.shared.domain.gang_network``), under a custom role
that holds the firewall rights and nothing more
(``spotline.infra.deploy.custom_roles``). A one-node job's VM accepts nothing.

Earlier deploys made one rule per VM account (``spotline-peers-*``), which let
every VM of a user reach every other VM of that user, another job's included;
a deploy deletes those. Destroy deletes every rule of spotline's, the gang
rules a crash left included, before the network.

Pure: the typed ``compute_v1`` bodies, compared with what exists; the
deployer and the destroyer send them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spotline.infra.deploy import iam
from spotline.shared.adapters import gce_firewalls
from spotline.shared.domain import tenancy

if TYPE_CHECKING:
    from google.cloud import compute_v1

NETWORK = tenancy.NETWORK
# The per-account rules of earlier deploys.
RULE_PREFIX = "spotline-peers"
network_path = gce_firewalls.network_path


def desired_network(config: iam.IamConfig) -> compute_v1.Network:
    from google.cloud import compute_v1

    return compute_v1.Network(
        name=NETWORK,
        description="spotline's VMs; a VM is reached by the nodes of its own gang only",
        # Auto mode: a subnet in every region, wherever a job's zones are.
        auto_create_subnetworks=True,
    )


def is_ours(firewall: compute_v1.Firewall, project: str) -> bool:
    """A rule of spotline's on its network: a gang's, or a peer rule of an earlier deploy."""
    on_ours = firewall.network.endswith(network_path(project))
    return on_ours and (is_peer_rule(firewall) or gce_firewalls.is_gang_rule(firewall, project))


def is_peer_rule(firewall: compute_v1.Firewall) -> bool:
    """An earlier deploy's rule for all the VMs of one account."""
    return firewall.name.startswith(RULE_PREFIX)
