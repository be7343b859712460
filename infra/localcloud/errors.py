"""What the local Compute Engine model refuses, as model errors.

The model never speaks HTTP: ``rest_api`` maps each of these to the status,
reason and place (the HTTP answer or the operation's error) Compute Engine uses.
"""

from __future__ import annotations


class ModelError(Exception):
    """A request the model refuses."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ModelError):
    """The VM, zone, region or operation does not exist."""


class AlreadyExists(ModelError):
    """A VM of that name exists in that zone."""


class NotReady(ModelError):
    """The VM is in a state that does not allow the call (e.g. being deleted)."""


class Invalid(ModelError):
    """The request itself is wrong."""


class Unsupported(ModelError):
    """The request asks for something Compute Engine does not do for such a VM."""


class Refused(ModelError):
    """A configured refusal of an insert or a start (a capacity rule): ``reason``
    as Compute Engine names it, answered with ``status`` in the HTTP answer, or
    in the operation's error when ``status`` is None."""

    def __init__(self, reason: str, message: str, status: int | None) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


class QuotaExceeded(ModelError):
    """The VMs would take a quota past its limit: a region's, or the project's
    (``region`` None), worded as Compute Engine words it."""

    def __init__(self, metric: str, limit: float, region: str | None) -> None:
        where = f"in region {region}" if region else "globally"
        super().__init__(f"Quota '{metric}' exceeded.  Limit: {limit:.1f} {where}.")
        self.metric = metric


class FingerprintMismatch(ModelError):
    """``setMetadata`` carried a fingerprint other than the metadata's current one."""
