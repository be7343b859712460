"""``spotline deploy`` and ``destroy`` for the VMs' network
(``spotline.infra.deploy.network`` says what and why): read, then create, patch
or delete only the difference; in a dry run, read and report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.api_core import exceptions as api_exceptions

from spotline.infra.deploy import iam, network
from spotline.infra.deploy.clients import ProjectClients
from spotline.infra.deploy.errors import DeployError

Record = Callable[[str, str, str, str], None]  # kind, name, action, detail
OPERATION_TIMEOUT_S = 300


class VmNetwork:
    """The network in ``config``'s project, and spotline's rules on it.

    Args:
        clients: the project's clients (Compute Engine over REST).
        config: the project.
        dry_run: read only; ``record`` says what would change.
        record: called once per resource with (kind, name, action, detail).
    """

    def __init__(
        self, clients: ProjectClients, config: iam.IamConfig, *, dry_run: bool, record: Record
    ) -> None:
        self.clients = clients
        self.config = config
        self.project = config.project
        self.dry_run = dry_run
        self._record = record

    def ensure(self) -> None:
        """The network, and no peer rule of an earlier deploy (each let a VM
        reach every VM of its account: other jobs' too). The gang rules are
        the functions'."""
        self._ensure_network()
        for stale in self._our_rules(peers_only=True):
            self._delete_rule(stale, "each gang has a rule of its own now")

    def delete(self) -> None:
        """Every rule of spotline's (a gang's a crash left, an earlier deploy's
        peer rule), then the network (Compute Engine refuses to delete a
        network that a rule or a VM still uses)."""
        for name in self._our_rules():
            self._delete_rule(name, "")
        try:
            self.clients.networks.get(project=self.project, network=network.NETWORK)
        except api_exceptions.NotFound:
            self._record("network", network.NETWORK, "absent", "")
            return
        if not self.dry_run:
            try:
                self._wait(
                    self.clients.networks.delete(project=self.project, network=network.NETWORK)
                )
            except api_exceptions.BadRequest as err:
                # A VM not made by spotline, or one still being deleted.
                self._record("network", network.NETWORK, "kept", f"in use: {err.message}")
                return
        self._record("network", network.NETWORK, "deleted", "")

    # -- the steps --------------------------------------------------------------------

    def _ensure_network(self) -> None:
        desired = network.desired_network(self.config)
        try:
            current = self.clients.networks.get(project=self.project, network=network.NETWORK)
        except api_exceptions.NotFound:
            if not self.dry_run:
                self._wait(
                    self.clients.networks.insert(project=self.project, network_resource=desired)
                )
            self._record("network", network.NETWORK, "created", "auto mode, no ingress but gangs'")
            return
        if not current.auto_create_subnetworks:
            raise DeployError(
                f"the project's network {network.NETWORK} is not in auto mode: spotline's VMs "
                "need a subnet in every region it places them in; delete or rename that network"
            )
        self._record("network", network.NETWORK, "unchanged", "")

    def _delete_rule(self, name: str, detail: str) -> None:
        if not self.dry_run:
            try:
                self._wait(self.clients.firewalls.delete(project=self.project, firewall=name))
            except api_exceptions.NotFound:
                self._record("firewall", name, "absent", detail)
                return
        self._record("firewall", name, "deleted", detail)

    def _our_rules(self, *, peers_only: bool = False) -> list[str]:
        """spotline's rules on its network (only earlier deploys' peer rules)."""
        found = self.clients.firewalls.list(project=self.project)
        return sorted(
            f.name
            for f in found
            if network.is_ours(f, self.project) and (network.is_peer_rule(f) or not peers_only)
        )

    def _wait(self, operation: Any) -> None:
        """Until Compute Engine's operation is done; raises its error."""
        operation.result(timeout=OPERATION_TIMEOUT_S)
