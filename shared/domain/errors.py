"""The small error taxonomy every handler follows.

A CloudEvent handler's return value is ignored by Pub/Sub; raising makes the
functions framework answer 500 and Pub/Sub redeliver. So:

* ``PermanentError``: retrying cannot help (bad input, illegal move). The handler
  records the reason, logs it and returns, which acknowledges the message.
* ``TransientError``: a dependency is unavailable. The handler raises and Pub/Sub
  redelivers with backoff, up to the dead-letter limit.
"""


class SpotlineError(Exception):
    """Base class of every error spotline raises on purpose."""


class PermanentError(SpotlineError):
    """Retrying will not help: record the reason, log it, acknowledge."""


class TransientError(SpotlineError):
    """Retrying may help: raise so that Pub/Sub redelivers."""


class InvalidMessage(PermanentError):
    """A message that is not valid JSON or does not match its schema."""


class IllegalTransition(PermanentError):
    """A state change that the transition table does not allow."""


class CapacityError(SpotlineError):
    """No capacity or quota for this machine in this zone: try the next option."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason  # e.g. ZONE_RESOURCE_POOL_EXHAUSTED, QUOTA_EXCEEDED


class Unplaceable(PermanentError):
    """A VM request that can never succeed, wherever and whenever it is tried:
    Compute Engine refuses it for good (an image or zone that does not exist, a
    malformed request, no permission; not capacity, not quota), or the job names
    a machine the catalog does not have. The job it was for ends FAILED."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        # What was refused and why, without the call that found it: for a person.
        self.detail = detail or message
