"""spotline's one retry policy (``spotline.shared.retries``): what a
predicate accepts is tried again with growing waits, anything else is raised
at once, and the tries end at the deadline."""

from __future__ import annotations

import time

import pytest
from google.api_core import exceptions

from spotline.shared.retries import (
    CONTENTION,
    Backoff,
    retried,
    transient_api_error,
)

QUICK = Backoff(initial_s=0.001, maximum_s=0.01, deadline_s=0.3)


class Flaky:
    """Fails with ``errors`` in turn, then answers ``done``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def test_what_the_predicate_accepts_is_tried_again_until_it_passes() -> None:
    flaky = Flaky(exceptions.ServiceUnavailable("503"), exceptions.Aborted("contention"))

    assert retried(flaky, transient_api_error, QUICK) == "done"
    assert flaky.calls == 3


def test_what_the_predicate_refuses_is_raised_at_once_as_it_was() -> None:
    flaky = Flaky(exceptions.BadRequest("no such field"))

    with pytest.raises(exceptions.BadRequest, match="no such field"):
        retried(flaky, transient_api_error, QUICK)
    assert flaky.calls == 1


def test_the_tries_end_at_the_deadline_with_the_last_failure() -> None:
    forever = Flaky(*(exceptions.ServiceUnavailable(f"503 #{n}") for n in range(100_000)))
    started = time.monotonic()

    with pytest.raises(exceptions.ServiceUnavailable):
        retried(forever, transient_api_error, QUICK)

    assert forever.calls > 1
    assert time.monotonic() - started < QUICK.deadline_s + 5  # generous: a loaded machine


def test_give_up_names_what_ended_the_tries() -> None:
    forever = Flaky(*(exceptions.Conflict("changed") for _ in range(100_000)))

    with pytest.raises(RuntimeError, match="gave up") as raised:
        retried(
            forever,
            lambda exc: isinstance(exc, exceptions.Conflict),
            QUICK,
            give_up=lambda last: RuntimeError(f"gave up after {last}"),
        )
    assert isinstance(raised.value.__cause__, exceptions.Conflict)


def test_the_waits_grow_with_jitter_up_to_the_ceiling() -> None:
    pauses = CONTENTION.pauses()
    drawn = [next(pauses) for _ in range(40)]

    assert all(0 <= pause <= CONTENTION.maximum_s for pause in drawn)
    assert max(drawn[:2]) <= CONTENTION.initial_s * CONTENTION.multiplier
    assert len(set(drawn)) > 30  # drawn at random: racing writers spread out


def test_the_transient_api_errors_are_googles_retryable_codes() -> None:
    for transient in (
        exceptions.Aborted,
        exceptions.DeadlineExceeded,
        exceptions.InternalServerError,
        exceptions.ServiceUnavailable,
        exceptions.TooManyRequests,
    ):
        assert transient_api_error(transient("x"))
    for permanent in (exceptions.BadRequest, exceptions.NotFound, exceptions.Forbidden):
        assert not transient_api_error(permanent("x"))
