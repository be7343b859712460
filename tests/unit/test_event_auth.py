"""The pure rules of event tokens: what is kept of them on the job, and bounds."""

from __future__ import annotations

from datetime import UTC, datetime

from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.event_auth import (
    MAX_HASHES_PER_ATTEMPT,
    new_token,
    refusal,
    token_hash,
    with_token_hash,
)
from spotline.shared.domain.lifecycle import new_job
from spotline.shared.domain.spec import JobSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def a_job(attempt: int = 1) -> JobDoc:
    spec = JobSpec.model_validate(
        {"user": "alice", "machine_ids": ["g2-standard-4"], "trainer": "digits_mlp", "job_id": "j"}
    )
    return new_job(spec, "j", "m", NOW).model_copy(update={"attempt": attempt})


def test_only_the_hash_is_kept_and_it_authenticates_its_attempt_only() -> None:
    token = new_token()
    job = with_token_hash(a_job(), 1, token_hash(token))
    assert token not in job.model_dump_json() and len(token) >= 43
    assert refusal(job, 1, token) is None
    assert refusal(job, 2, token) == "its token is not one handed to attempt 2 of job j"
    assert refusal(job, 1, new_token()) is not None
    assert refusal(job, 1, "") == "it carries no token"


def test_each_placement_run_adds_one_and_a_repeat_adds_nothing() -> None:
    first, second = new_token(), new_token()
    job = with_token_hash(a_job(), 1, token_hash(first))
    job = with_token_hash(job, 1, token_hash(second))
    assert with_token_hash(job, 1, token_hash(second)) is job
    assert refusal(job, 1, first) is None and refusal(job, 1, second) is None


def test_past_the_bound_the_oldest_run_of_the_attempt_goes() -> None:
    tokens = [new_token() for _ in range(MAX_HASHES_PER_ATTEMPT + 1)]
    job = a_job()
    for token in tokens:
        job = with_token_hash(job, 1, token_hash(token))
    assert len(job.event_token_hashes["1"]) == MAX_HASHES_PER_ATTEMPT
    assert refusal(job, 1, tokens[0]) is not None
    assert all(refusal(job, 1, token) is None for token in tokens[1:])


def test_the_current_and_the_previous_attempt_are_kept() -> None:
    one, two, three = new_token(), new_token(), new_token()
    job = with_token_hash(a_job(1), 1, token_hash(one))
    job = with_token_hash(job.model_copy(update={"attempt": 2}), 2, token_hash(two))
    assert refusal(job, 1, one) is None  # a late event of attempt 1 still authenticates
    job = with_token_hash(job.model_copy(update={"attempt": 3}), 3, token_hash(three))
    assert sorted(job.event_token_hashes) == ["2", "3"]
    assert refusal(job, 1, one) is not None and refusal(job, 2, two) is None


def test_each_replacement_holds_its_own_token_and_the_gangs_never_goes() -> None:
    """A gang that replaces node 1 more times than the bound within one
    attempt: node 0's token (the gang's placement run) still authenticates,
    and so does each replacement's while it is one of the gang's nodes (or
    the node being replaced); a replacement lost two losses ago does not,
    and no token serves another node's name."""
    gang = new_token()
    job = with_token_hash(a_job(), 1, token_hash(gang))
    job = job.model_copy(update={"nodes": ["n0", "n1"]})
    held: dict[str, str] = {}
    for k in range(1, MAX_HASHES_PER_ATTEMPT + 3):
        name = f"n1-g{k}"
        job = job.model_copy(update={"nodes": ["n0", name]})
        held[name] = new_token()
        for _ in range(2):  # a capacity refusal, then the run whose VM holds it
            refused = new_token()
            job = with_token_hash(job, 1, token_hash(refused), holder=name)
        job = with_token_hash(job, 1, token_hash(held[name]), holder=name)
    last = f"n1-g{MAX_HASHES_PER_ATTEMPT + 2}"
    assert refusal(job, 1, gang, "n0") is None
    assert refusal(job, 1, held[last], last) is None
    assert refusal(job, 1, held[last], "n0") is not None
    assert refusal(job, 1, held["n1-g1"], "n1-g1") is not None
    assert len(job.event_token_hashes) <= 3  # the gang's runs, the node and the one replaced
