"""Binding a VM's events to the job and attempt it was placed for.

Anyone who may publish to a VM-event topic (every spotline VM may) could name
any job. So each placement run of an attempt makes a random token, keeps only
its SHA-256 on the job (``JobDoc.event_token_hashes``, written before the token
leaves the function) and hands the token to the attempt's VMs in their
metadata (``EVENT_TOKEN_METADATA_KEY``); every VM event carries it back. An
event is taken only when its token hashes to one kept for its job and attempt.

Why a set of hashes per attempt, not one: placement is re-entrant (a
redelivered submit, a function that died between its write and its insert runs
again), and Compute Engine dedupes inserts by requestId, so a VM may hold the
token of an earlier run of the same placement. Every hash kept for an attempt
belongs to a token only ever handed to that attempt's VMs (or to none).

A gang's replacement node (``node_replacement``) gets a token of its own,
kept under its name (``"ATTEMPT/NAME"``) while it is one of the gang's nodes
or the node being replaced: an attempt may replace nodes without end, and a
replacement's runs must never push out the token its gang's other nodes hold.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from spotline.shared.domain import pending_nodes
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import PermanentError

# Placement runs of one attempt whose hashes are kept. A run that finds the
# attempt's VM adopts it and hands out no token, so only runs whose inserts all
# failed (waiting for capacity) come after the one that made the VM; past the
# bound the oldest hash goes, which is such a run's (its token reached no VM).
MAX_HASHES_PER_ATTEMPT = 16
# Attempts whose hashes are kept: the current one and the one before, so a late
# event of the previous attempt still authenticates and is then judged stale by
# the lifecycle (its saved step still counts). Older ones are refused here.
ATTEMPTS_KEPT = 2
# secrets.token_urlsafe(32): 43 characters.
TOKEN_BYTES = 32


class ForgedEvent(PermanentError):
    """A VM event whose token was not handed to its job's attempt: dropped."""


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    """What is stored of a token: its SHA-256, hex. A 256-bit random token
    needs no salt or slow hash: nothing can be guessed from the digest."""
    return hashlib.sha256(token.encode()).hexdigest()


def with_token_hash(job: JobDoc, attempt: int, digest: str, holder: str | None = None) -> JobDoc:
    """The job keeping ``digest`` for ``attempt`` (pure; a redelivery adds
    nothing twice), bounded as the constants above say; ``holder``: the one
    replacement VM it is for (None: the attempt's placement)."""
    kept = dict(job.event_token_hashes)
    key = _key(attempt, holder)
    hashes = kept.get(key, [])
    if digest not in hashes:
        kept[key] = [*hashes, digest][-MAX_HASHES_PER_ATTEMPT:]
    newest = max(job.attempt, attempt)
    kept = {
        key: value
        for key, value in kept.items()
        if _attempt_of(key) > newest - ATTEMPTS_KEPT and _holding(job, key)
    }
    if kept == job.event_token_hashes:
        return job
    return job.model_copy(update={"event_token_hashes": kept})


def _key(attempt: int, holder: str | None) -> str:
    return str(attempt) if holder is None else f"{attempt}/{holder}"


def _attempt_of(key: str) -> int:
    return int(key.partition("/")[0])


def _holding(job: JobDoc, key: str) -> bool:
    """Whether a key's VM may still send events worth hearing: a placement's
    (every VM of the attempt), or a replacement of an earlier attempt (a late
    save there still counts), or one of the current attempt's nodes, or the
    node being replaced (its late save report)."""
    attempt, _, holder = key.partition("/")
    if not holder or int(attempt) != job.attempt or holder in job.nodes:
        return True
    return pending_nodes.of_lost(job, holder) is not None


def refusal(job: JobDoc, attempt: int, token: str, instance: str = "") -> str | None:
    """Why an event of ``attempt`` from ``instance`` carrying ``token`` is
    not the job's; None: it is."""
    if not token:
        return "it carries no token"
    digest = token_hash(token)
    kept = job.event_token_hashes.get(str(attempt), [])
    if instance:
        kept = [*kept, *job.event_token_hashes.get(_key(attempt, instance), [])]
    # Every stored digest is compared, in constant time each: nothing is
    # learned from how long a refusal takes.
    matched = False
    for stored in kept:
        matched |= hmac.compare_digest(stored, digest)
    if matched:
        return None
    return f"its token is not one handed to attempt {attempt} of job {job.job_id}"
