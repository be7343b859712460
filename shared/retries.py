"""spotline's one retry policy: which failures are tried again, how long to
wait between tries, and when to stop.

Every retry in spotline goes through ``google.api_core.retry``: a predicate
says what is retried (anything else is raised at once), the waits grow
exponentially with full jitter (racing writers spread out) up to a ceiling,
and a deadline ends the tries (the last failure is then raised, or what
``give_up`` makes of it). What differs between callers is only the pace,
named here once per kind of wait.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from google.api_core.retry import Retry, RetryFailureReason

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Waits from ``initial_s``, times ``multiplier`` each try, at most
    ``maximum_s`` each (each drawn at random below its bound), and no try
    started after ``deadline_s`` from the first."""

    initial_s: float
    maximum_s: float
    deadline_s: float
    multiplier: float = 2.0

    def pauses(self) -> Iterator[float]:
        """The waits, drawn as ``google.api_core.retry`` draws them."""
        from google.api_core.retry import exponential_sleep_generator

        return exponential_sleep_generator(self.initial_s, self.maximum_s, self.multiplier)

    def retry(self, predicate: Callable[[Exception], bool]) -> Retry:
        """This pace as a ``google.api_core.retry.Retry`` for a client call."""
        from google.api_core.retry import Retry

        return Retry(
            predicate=predicate,
            initial=self.initial_s,
            maximum=self.maximum_s,
            multiplier=self.multiplier,
            timeout=self.deadline_s,
        )


# A guarded Firestore write (or the in-memory store's) lost a race: re-read and
# apply again soon; past the deadline, contention is reported, not waited out.
CONTENTION = Backoff(initial_s=0.01, maximum_s=0.5, deadline_s=10.0)
# A read of Compute Engine answered 503 or timed out (``compute_unavailable``;
# reads change nothing); the deadline is GceCompute's ``read_retry_s``.
COMPUTE_READS = Backoff(initial_s=0.2, maximum_s=5.0, deadline_s=20.0)
# Polling a Compute Engine operation whose wait failed to read (a 503, a 500,
# a 429, a dropped connection): the operation carries on; the deadline is what
# is left of the call's operation timeout.
OPERATION_POLL = Backoff(initial_s=0.2, maximum_s=5.0, deadline_s=300.0)
# IAM does not know a service account made a moment ago (eventual
# consistency; Google's guides retry), or a policy changed under the write:
# usually settled within a minute.
IAM_PROPAGATION = Backoff(initial_s=2.0, maximum_s=32.0, deadline_s=120.0)
# A VM's metadata write refused (its fingerprint stale: another writer
# changed the metadata since the read) or unanswered: read again and write.
METADATA_WRITE = Backoff(initial_s=0.1, maximum_s=2.0, deadline_s=20.0)
# A publish to Pub/Sub failed in a transient way (``transient_api_error``);
# the deadline is the publisher's timeout.
PUBLISH = Backoff(initial_s=0.1, maximum_s=1.0, deadline_s=30.0)
# A signed upload URL refused with 403 right after it was made (permissions
# still propagating, as gcloud retries).
UPLOAD_PROPAGATION = Backoff(initial_s=1.0, maximum_s=8.0, deadline_s=30.0)


def transient_api_error(exc: Exception) -> bool:
    """A Google API failure that may pass if tried again (the retryable codes
    of Google's client libraries): aborted, cancelled, deadline exceeded,
    internal, too many requests (resource exhausted), unavailable, unknown."""
    from google.api_core import exceptions

    return isinstance(
        exc,
        exceptions.Aborted
        | exceptions.Cancelled
        | exceptions.DeadlineExceeded
        | exceptions.InternalServerError
        | exceptions.TooManyRequests
        | exceptions.ServiceUnavailable
        | exceptions.Unknown,
    )


def compute_unavailable(exc: Exception) -> bool:
    """Compute Engine could not answer a read: 503, or past its deadline."""
    from google.api_core import exceptions

    return isinstance(exc, exceptions.ServiceUnavailable | exceptions.DeadlineExceeded)


def retried(
    target: Callable[[], T],
    predicate: Callable[[Exception], bool],
    backoff: Backoff,
    give_up: Callable[[Exception], Exception] | None = None,
) -> T:
    """``target()``, tried again after each failure ``predicate`` accepts.

    Raises:
        the first failure ``predicate`` refuses, at once; past the deadline,
        the last failure, or ``give_up(last)`` where given.
    """
    from google.api_core.retry import retry_target

    def ended(
        errors: list[Exception], reason: RetryFailureReason, timeout: float | None
    ) -> tuple[Exception, Exception | None]:
        from google.api_core.retry import RetryFailureReason

        last = errors[-1]
        if give_up is not None and reason is RetryFailureReason.TIMEOUT:
            return give_up(last), last
        cause = last.__cause__
        return last, cause if isinstance(cause, Exception) else None

    return retry_target(
        target, predicate, backoff.pauses(), backoff.deadline_s, exception_factory=ended
    )
