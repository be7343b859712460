"""Making an attempt's event token, and keeping its hash before it leaves.

See ``spotline.shared.domain.event_auth``: the hash is written on the job (a guarded
write) before the token goes into an insert or a setMetadata, so a VM never
holds a token its job does not know, whatever crashes come between.
"""

from __future__ import annotations

from spotline.functions.deps import Deps
from spotline.shared.domain.documents import JobDoc
from spotline.shared.domain.errors import PermanentError
from spotline.shared.domain.event_auth import new_token, token_hash, with_token_hash


def issue_event_token(deps: Deps, job: JobDoc, holder: str | None = None) -> str:
    """A fresh token for the VMs of ``job``'s current attempt (``holder``:
    for its one replacement VM of that name), its hash kept.

    Every run makes a new one (a redelivered placement too): the token of an
    earlier run, which a VM may hold already, stays valid beside it.

    Raises:
        PermanentError: the job is gone.
    """
    token = new_token()
    digest = token_hash(token)
    kept = deps.store.update_job(
        job.job_id, lambda current: with_token_hash(current, job.attempt, digest, holder)
    )
    if kept is None:
        raise PermanentError(f"job {job.job_id} is gone: no VM is handed its attempt")
    return token
