"""Pure translation of a gang's firewall rule (``spotline.shared.domain.gang_network``)
into the ``compute_v1.Firewall`` that ``GceCompute.allow_gang`` inserts.

``google.cloud.compute_v1`` is imported when first needed, as in ``gce_requests``.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from spotline.shared.domain import tenancy

if TYPE_CHECKING:
    from google.cloud import compute_v1

# Below the implied deny-all ingress (65535); spotline's network holds no other rule.
PRIORITY = 1000
# Between a gang's nodes: the rendezvous port and NCCL's and Ray's own, chosen at run time.
PROTOCOLS = ("tcp", "udp", "icmp")
_REQUEST_IDS = uuid.UUID("0b6f5d1e-2a55-4c1f-9d4c-3e7a51f0c2a8")


def network_path(project: str) -> str:
    return f"projects/{project}/global/networks/{tenancy.NETWORK}"


def gang_rule(project: str, tag: str) -> compute_v1.Firewall:
    """VMs tagged ``tag`` accept connections from VMs tagged ``tag``, on any port.

    A source tag matches only the primary internal address of a VM on the same
    network: nothing outside spotline's network, and no VM without the tag.
    """
    from google.cloud import compute_v1

    return compute_v1.Firewall(
        name=tag,
        description=f"spotline: the nodes of {tag} reach each other",
        network=network_path(project),
        direction="INGRESS",
        priority=PRIORITY,
        allowed=[compute_v1.Allowed(I_p_protocol=protocol) for protocol in PROTOCOLS],
        source_tags=[tag],
        target_tags=[tag],
    )


def insert_request_id(tag: str) -> str:
    """The same for every try: a retried insert whose answer was lost is not a second rule."""
    return str(uuid.uuid5(_REQUEST_IDS, tag))


def is_gang_rule(firewall: compute_v1.Firewall, project: str) -> bool:
    """A rule on spotline's network whose source and target are one tag, its own name."""
    return (
        firewall.network.endswith(network_path(project))
        and list(firewall.source_tags) == [firewall.name]
        and list(firewall.target_tags) == [firewall.name]
    )
