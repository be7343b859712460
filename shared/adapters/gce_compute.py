"""The compute port over Compute Engine, through google-cloud-compute's REST client.

Requests are built by the pure functions of ``gce_requests`` and ``gce_gang``;
this module sends them, waits for the zone and region operations they start, and
turns every failure into the port's ``CapacityError``, ``TransientError`` or
``PermanentError`` (``Unplaceable`` for an insert Compute Engine refuses for good).
"""

from __future__ import annotations

import builtins
import ipaddress
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import requests
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

from spotline.shared.adapters import gce_firewalls, gce_gang, gce_requests
from spotline.shared.adapters.gce_requests import ErrorKind
from spotline.shared.domain.errors import (
    CapacityError,
    PermanentError,
    SpotlineError,
    TransientError,
    Unplaceable,
)
from spotline.shared.domain.vms import GangRequest, Quota, Vm, VmRequest, VmState
from spotline.shared.retries import COMPUTE_READS, OPERATION_POLL, compute_unavailable, retried

if TYPE_CHECKING:
    from google.auth.credentials import Credentials
    from google.cloud import compute_v1

log = logging.getLogger(__name__)

# A poll of an operation that fails in these ways is polled again (at the
# pace of OPERATION_POLL) until the operation's deadline; a poll that timed out
# has used the deadline up.
_POLL_RETRIED = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.InternalServerError,
    api_exceptions.TooManyRequests,
    requests.ConnectionError,
)


def _poll_failed_to_read(exc: Exception) -> bool:
    return isinstance(exc, _POLL_RETRIED) and not isinstance(exc, requests.Timeout)


# Operation error codes that mean the call's goal is already reached.
_ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"
_NOT_FOUND = "RESOURCE_NOT_FOUND"


class GceCompute:
    """Creates, reads, lists and deletes spotline's VMs in one Google Cloud project,
    and reads its regional quotas.

    Args:
        project: the project ID.
        api_endpoint: overrides ``compute.googleapis.com``, e.g.
            ``http://127.0.0.1:8089`` for the local cloud (``spotline.infra.localcloud``).
        credentials: defaults to Application Default Credentials, or to
            anonymous ones for a loopback ``http://`` endpoint (the local cloud
            takes none, and no real credential should travel in clear text).
        operation_timeout_s: how long a call waits for its operation before
            raising ``TransientError`` (the operation carries on regardless).
        request_timeout_s: the HTTP timeout of each call that is not a wait.
        read_retry_s: how long reads retry 503s and timeouts before giving up.
    """

    def __init__(
        self,
        project: str,
        *,
        api_endpoint: str | None = None,
        credentials: Credentials | None = None,
        operation_timeout_s: float = 300.0,
        request_timeout_s: float = 60.0,
        read_retry_s: float = 20.0,
    ) -> None:
        # google.cloud.compute_v1 takes over 2 s to import; only the functions
        # that build a GceCompute should pay for it on a cold start.
        from google.api_core.client_options import ClientOptions
        from google.cloud import compute_v1

        options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
        if credentials is None and api_endpoint and is_loopback_http(api_endpoint):
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        self._project = project
        self._instances = compute_v1.InstancesClient(
            credentials=credentials, client_options=options
        )
        self._region_instances = compute_v1.RegionInstancesClient(
            credentials=credentials, client_options=options
        )
        self._regions = compute_v1.RegionsClient(credentials=credentials, client_options=options)
        self._projects = compute_v1.ProjectsClient(credentials=credentials, client_options=options)
        # The operations clients must share the endpoint: ExtendedOperation's own
        # polling ignores api_endpoint, hence the *_unary calls plus wait().
        self._operations = compute_v1.ZoneOperationsClient(
            credentials=credentials, client_options=options
        )
        self._region_operations = compute_v1.RegionOperationsClient(
            credentials=credentials, client_options=options
        )
        self._firewalls = compute_v1.FirewallsClient(
            credentials=credentials, client_options=options
        )
        self._global_operations = compute_v1.GlobalOperationsClient(
            credentials=credentials, client_options=options
        )
        self._operation_timeout_s = operation_timeout_s
        self._request_timeout_s = request_timeout_s
        self._read_retry = replace(COMPUTE_READS, deadline_s=read_retry_s).retry(
            compute_unavailable
        )

    def insert(self, request: VmRequest) -> Vm:
        """Create the VM, or return it if it already exists.

        Raises:
            CapacityError: no capacity or quota for this machine in this zone.
            TransientError: the call may pass later.
            Unplaceable: Compute Engine will never accept this request (e.g. no
                such image or zone).
        """
        action = f"insert {request.name} in {request.zone}"
        with _translated_errors(action, unplaceable=True, project=self._project):
            try:
                operation = self._instances.insert_unary(
                    request=gce_requests.insert_request(self._project, request),
                    timeout=self._request_timeout_s,
                )
            except api_exceptions.Conflict:
                existing = self.get(request.zone, request.name)
                if existing is None:
                    raise
                return existing
            operation = self._wait(request.zone, operation)
        if _error_codes(operation) != {_ALREADY_EXISTS}:
            _raise_for_operation(operation, unplaceable=True, project=self._project)
        try:
            vm = self.get(request.zone, request.name)
        except TransientError:
            # Made, but not read back: report it made (a caller told otherwise
            # leaves it running unrecorded), as far as the request knows it.
            return _requested_vm(request, VmState.PROVISIONING)
        if vm is None:
            # A Spot VM can be preempted, and so deleted, before it is read back.
            return _requested_vm(request, VmState.TERMINATED)
        return vm

    def insert_gang(self, gang: GangRequest) -> list[Vm]:
        """Create every node of ``gang`` in one of ``gang.zones``, or none of them.

        One ``regionInstances.bulkInsert``: Compute Engine picks a zone that can
        hold all the nodes and dedupes a retried call by ``gang.request_id``.
        Nodes that already exist (a redelivered request) are returned as they are.

        Returns:
            The VMs in ``gang.nodes`` order, all in one zone.

        Raises:
            CapacityError: no allowed zone has the capacity or quota for every node.
            TransientError: the call may pass later.
            Unplaceable: Compute Engine will never accept this request.
        """
        request = gce_gang.bulk_insert_request(self._project, gang)
        action = f"bulk insert {len(gang.nodes)} VMs in {gang.region}"
        with _translated_errors(action, unplaceable=True, project=self._project):
            try:
                operation = self._region_instances.bulk_insert_unary(
                    request=request, timeout=self._request_timeout_s
                )
            except api_exceptions.Conflict:
                return self._existing_gang(gang)
            operation = self._wait_region(gang.region, operation)
        if _error_codes(operation) != {_ALREADY_EXISTS}:
            _raise_for_operation(operation, unplaceable=True, project=self._project)
        return self._existing_gang(gang)

    def _existing_gang(self, gang: GangRequest) -> list[Vm]:
        vms = gce_gang.gang_vms(gang, self.list(gce_gang.shared_labels(gang.nodes)))
        if vms is None:
            raise TransientError(
                f"gang {gang.request_id}: created, but none of its VMs is listed yet"
            )
        return vms

    def get(self, zone: str, name: str) -> Vm | None:
        """The VM, or ``None`` when it does not exist."""
        with _translated_errors(f"get {name} in {zone}"):
            try:
                instance = self._read(zone, name)
            except api_exceptions.NotFound:
                return None
        return gce_requests.vm_from_instance(instance)

    def list(self, labels: dict[str, str]) -> list[Vm]:
        """Every VM in the project, in any zone, that carries all ``labels``."""
        with _translated_errors(f"list VMs labelled {labels}"):
            pages = self._instances.aggregated_list(
                request=gce_requests.aggregated_list_request(self._project, labels),
                retry=self._read_retry,
                timeout=self._request_timeout_s,
            )
            instances = [instance for _, scoped in pages for instance in scoped.instances]
        vms = [gce_requests.vm_from_instance(instance) for instance in instances]
        # The filter is matched by the server's own grammar (with wildcards);
        # the port promises exact label equality.
        return [vm for vm in vms if labels.items() <= vm.labels.items()]

    def region_quotas(self, region: str) -> dict[str, Quota]:
        """The project's allocation quotas in ``region``, by metric (``regions.get``).

        Raises:
            PermanentError: e.g. no ``compute.regions.get`` permission.
            TransientError: the call may pass later.
        """
        with _translated_errors(f"get the quotas of {region}"):
            found = self._regions.get(
                project=self._project,
                region=region,
                retry=self._read_retry,
                timeout=self._request_timeout_s,
            )
        return gce_requests.quotas_from_region(found)

    def project_quotas(self) -> dict[str, Quota]:
        """The project's global quotas, by metric (``projects.get``): among
        them ``GPUS_ALL_REGIONS``, 0 in a new project.

        Raises:
            PermanentError: e.g. no ``compute.projects.get`` permission.
            TransientError: the call may pass later.
        """
        with _translated_errors("get the project's quotas"):
            found = self._projects.get(
                project=self._project, retry=self._read_retry, timeout=self._request_timeout_s
            )
        return {q.metric: Quota(q.metric, q.limit, q.usage) for q in found.quotas}

    def delete(self, zone: str, name: str) -> None:
        """Delete the VM and wait until it is gone; a missing VM is not an error."""
        self.delete_many([(zone, name)])

    def delete_many(self, vms: Sequence[tuple[str, str]]) -> None:
        """Delete every ``(zone, name)`` VM and wait until all are gone: every
        delete is sent before any is waited for, since Compute Engine takes
        tens of seconds to delete a running VM (its guest may take 30 s to shut
        down). A missing VM is not an error; the first failure is raised once
        every operation has been waited for."""
        sent: list[tuple[str, str, compute_v1.Operation]] = []
        for zone, name in vms:
            with _translated_errors(f"delete {name} in {zone}"):
                try:
                    operation = self._instances.delete_unary(
                        project=self._project,
                        zone=zone,
                        instance=name,
                        timeout=self._request_timeout_s,
                    )
                except api_exceptions.NotFound:
                    continue
            sent.append((zone, name, operation))
        failure: SpotlineError | None = None
        for zone, name, operation in sent:
            try:
                with _translated_errors(f"delete {name} in {zone}"):
                    done = self._wait(zone, operation)
                if _error_codes(done) != {_NOT_FOUND}:
                    _raise_for_operation(done)
            except SpotlineError as err:
                failure = failure or err
        if failure is not None:
            raise failure

    def stop(self, zone: str, name: str) -> bool:
        """Shut the VM down, keeping its disk, and wait until it is down."""
        with _translated_errors(f"stop {name} in {zone}"):
            try:
                operation = self._instances.stop_unary(
                    project=self._project,
                    zone=zone,
                    instance=name,
                    timeout=self._request_timeout_s,
                )
            except api_exceptions.NotFound:
                return False
            operation = self._wait(zone, operation)
        if _error_codes(operation) == {_NOT_FOUND}:
            return False
        _raise_for_operation(operation)
        return True

    def start(self, zone: str, name: str) -> None:
        """Boot the stopped VM; returns once Compute Engine has started it."""
        with _translated_errors(f"start {name} in {zone}"):
            operation = self._instances.start_unary(
                project=self._project,
                zone=zone,
                instance=name,
                timeout=self._request_timeout_s,
            )
            operation = self._wait(zone, operation)
        _raise_for_operation(operation)

    def set_metadata(
        self,
        zone: str,
        name: str,
        items: dict[str, str],
        unless: Callable[[dict[str, str]], bool] | None = None,
    ) -> None:
        """Set ``items`` on the VM's metadata, keeping its other items; not
        when ``unless`` is True of its items as read (a newer value there).

        A concurrent change to the VM's metadata raises ``TransientError``: the
        retry re-reads the fingerprint (and asks ``unless`` again).
        """
        with _translated_errors(f"set metadata of {name} in {zone}"):
            instance = self._read(zone, name)
            current = {item.key: item.value for item in instance.metadata.items}
            if unless is not None and unless(current):
                return
            metadata = gce_requests.merged_metadata(instance.metadata, items)
            operation = self._instances.set_metadata_unary(
                request=gce_requests.set_metadata_request(self._project, zone, name, metadata),
                timeout=self._request_timeout_s,
            )
            operation = self._wait(zone, operation)
        _raise_for_operation(operation)

    # -- a gang's firewall rule (spotline.shared.domain.gang_network) --

    def allow_gang(self, tag: str) -> None:
        """Let VMs tagged ``tag`` reach each other; the rule existing already is success."""
        from google.cloud import compute_v1

        rule = gce_firewalls.gang_rule(self._project, tag)
        with _translated_errors(f"make the firewall rule {tag}"):
            try:
                operation = self._firewalls.insert_unary(
                    request=compute_v1.InsertFirewallRequest(
                        project=self._project,
                        firewall_resource=rule,
                        request_id=gce_firewalls.insert_request_id(tag),
                    ),
                    timeout=self._request_timeout_s,
                )
            except api_exceptions.Conflict:
                self._check_gang_rule(tag)  # made by an earlier delivery: one name, one body
                return
            done = self._wait_global(operation)
        if _error_codes(done) == {_ALREADY_EXISTS}:
            self._check_gang_rule(tag)
        else:
            _raise_for_operation(done)

    def _check_gang_rule(self, tag: str) -> None:
        """Raise ``PermanentError`` unless the rule named ``tag`` is the gang's."""
        if self._gang_rule(tag) is False:
            raise PermanentError(
                f"a firewall rule named {tag} exists and is not a spotline gang rule: "
                "rename or delete it, then submit the job again"
            )

    def _gang_rule(self, tag: str) -> bool | None:
        """Whether the rule ``tag`` is a gang rule; None when there is none."""
        with _translated_errors(f"read the firewall rule {tag}"):
            try:
                found = self._firewalls.get(
                    project=self._project,
                    firewall=tag,
                    retry=self._read_retry,
                    timeout=self._request_timeout_s,
                )
            except api_exceptions.NotFound:
                return None
        return gce_firewalls.is_gang_rule(found, self._project)

    def end_gang(self, tag: str) -> None:
        """Delete the rule ``tag`` and wait until it is gone; a missing rule,
        or one of that name that is not a gang rule (someone else's), is left."""
        if not self._gang_rule(tag):
            return
        with _translated_errors(f"delete the firewall rule {tag}"):
            try:
                operation = self._firewalls.delete_unary(
                    project=self._project, firewall=tag, timeout=self._request_timeout_s
                )
            except api_exceptions.NotFound:
                return
            done = self._wait_global(operation)
        if _error_codes(done) != {_NOT_FOUND}:
            _raise_for_operation(done)

    def gang_rules(self) -> builtins.list[str]:
        """The names of the gang rules on spotline's network."""
        with _translated_errors("list the firewall rules"):
            found = self._firewalls.list(
                project=self._project, retry=self._read_retry, timeout=self._request_timeout_s
            )
            return sorted(f.name for f in found if gce_firewalls.is_gang_rule(f, self._project))

    def _read(self, zone: str, name: str) -> compute_v1.Instance:
        return self._instances.get(
            project=self._project,
            zone=zone,
            instance=name,
            retry=self._read_retry,
            timeout=self._request_timeout_s,
        )

    def _wait(self, zone: str, operation: compute_v1.Operation) -> compute_v1.Operation:
        def poll(timeout: float) -> compute_v1.Operation:
            return self._operations.wait(
                project=self._project, zone=zone, operation=operation.name, timeout=timeout
            )

        return self._wait_until_done(operation, poll, zone)

    def _wait_region(self, region: str, operation: compute_v1.Operation) -> compute_v1.Operation:
        def poll(timeout: float) -> compute_v1.Operation:
            return self._region_operations.wait(
                project=self._project, region=region, operation=operation.name, timeout=timeout
            )

        return self._wait_until_done(operation, poll, region)

    def _wait_global(self, operation: compute_v1.Operation) -> compute_v1.Operation:
        def poll(timeout: float) -> compute_v1.Operation:
            return self._global_operations.wait(
                project=self._project, operation=operation.name, timeout=timeout
            )

        return self._wait_until_done(operation, poll, "global")

    def _wait_until_done(
        self,
        operation: compute_v1.Operation,
        poll: Callable[[float], compute_v1.Operation],
        where: str,
    ) -> compute_v1.Operation:
        deadline = time.monotonic() + self._operation_timeout_s
        while operation.status != operation.Status.DONE:
            if operation.status == operation.Status.UNDEFINED_STATUS:
                _unknown_operation_status(operation.name)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._not_done(where, operation)
            try:
                # operations.wait answers when the operation is done or after
                # about two minutes, whichever comes first. A poll that fails
                # only to read is tried again: its 503 says nothing of the
                # operation, which carries on. Failing here would report a VM
                # that was made as not made, and leave it running unrecorded.
                operation = retried(
                    lambda: poll(max(deadline - time.monotonic(), 0.001)),
                    _poll_failed_to_read,
                    replace(OPERATION_POLL, deadline_s=remaining),
                    give_up=partial(self._given_up, where, operation),
                )
            except requests.Timeout as exc:
                raise self._not_done(where, operation) from exc
        return operation

    def _given_up(
        self, where: str, operation: compute_v1.Operation, last: Exception
    ) -> TransientError:
        return self._not_done(where, operation)

    def _not_done(self, where: str, operation: compute_v1.Operation) -> TransientError:
        return TransientError(
            f"operation {operation.name} in {where} not done after "
            f"{self._operation_timeout_s:g} s; it carries on, and a retry finds its result"
        )


_UNKNOWN_OPERATION_STATUS_LOGGED: list[bool] = []


def _unknown_operation_status(name: str) -> None:
    """An operation status the client library does not know (it reads it as
    UNDEFINED_STATUS) is taken as not done: the wait goes on to its deadline.
    Logged once a process."""
    if not _UNKNOWN_OPERATION_STATUS_LOGGED:
        _UNKNOWN_OPERATION_STATUS_LOGGED.append(True)
        log.warning(
            "Compute Engine answered an operation status spotline does not know "
            "(operation %s): taken as not done yet",
            name,
        )


def _requested_vm(request: VmRequest, state: VmState) -> Vm:
    """The VM ``request`` made, as far as the request says (no id)."""
    return Vm(
        name=request.name,
        zone=request.zone,
        state=state,
        labels=dict(request.labels),
        machine_type=request.machine_type,
    )


def is_loopback_http(endpoint: str) -> bool:
    """Whether ``endpoint`` is plain HTTP on this machine (a local cloud)."""
    url = urlsplit(endpoint)
    if url.scheme != "http" or not url.hostname:
        return False
    if url.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(url.hostname).is_loopback
    except ValueError:
        return False


@contextmanager
def _translated_errors(action: str, unplaceable: bool = False, project: str = "") -> Iterator[None]:
    """Turn the client's exceptions into the port's; with ``unplaceable`` (an
    insert in ``project``), a permanent one is ``Unplaceable``."""
    try:
        yield
    except api_exceptions.GoogleAPICallError as exc:
        reasons = [(str(e.get("reason", "")), str(e.get("message", ""))) for e in exc.errors]
        # The errors' own messages, without the method and URL the client puts first.
        summary = "; ".join(dict.fromkeys(m for _, m in reasons if m)) or exc.message
        if exc.reason:
            reasons.append((exc.reason, exc.message))
        raise _port_error(action, reasons, exc.code, summary, unplaceable, project) from exc
    except (
        api_exceptions.RetryError,
        requests.RequestException,
        auth_exceptions.TransportError,
    ) as exc:
        raise TransientError(f"{action}: {exc}") from exc


def _error_codes(operation: compute_v1.Operation) -> set[str]:
    return {error.code for error in operation.error.errors}


def _raise_for_operation(
    operation: compute_v1.Operation, unplaceable: bool = False, project: str = ""
) -> None:
    errors = operation.error.errors
    if not errors:
        return
    reasons = [(error.code, error.message) for error in errors]
    summary = "; ".join(f"{code}: {message}" for code, message in reasons)
    status = operation.http_error_status_code or None
    raise _port_error(f"operation {operation.name}", reasons, status, summary, unplaceable, project)


def _port_error(
    action: str,
    reasons: Sequence[tuple[str, str]],
    status: int | None,
    summary: str,
    unplaceable: bool = False,
    project: str = "",
) -> SpotlineError:
    """The port's error for an API error's reasons, then its HTTP status. An
    insert refused on a quota whose limit is 0 is ``Unplaceable``: nothing
    that ends frees it."""
    kinds = [(gce_requests.classify_error(r, m), r, m) for r, m in reasons]
    for kind, reason, message in kinds:
        if kind is ErrorKind.CAPACITY:
            never = gce_requests.zero_quota(message, project) if unplaceable else None
            if never is not None:
                return Unplaceable(f"{action}: {message}", detail=never)
            return CapacityError(reason, message)
    if any(kind is ErrorKind.TRANSIENT for kind, _, _ in kinds):
        return TransientError(f"{action}: {summary}")
    if status is not None and gce_requests.kind_for_status(status) is ErrorKind.TRANSIENT:
        return TransientError(f"{action}: {summary}")
    if unplaceable:
        return Unplaceable(f"{action}: {summary}", detail=summary)
    return PermanentError(f"{action}: {summary}")
