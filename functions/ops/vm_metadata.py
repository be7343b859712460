"""Writing items into a VM's metadata so that they land: a write refused
as transient (another writer changed the metadata since the read, so its
fingerprint is stale; or Compute Engine did not answer) is made again on a
fresh read, within ``retries.METADATA_WRITE``'s deadline. The functions'
writes that nothing redelivers (a regroup, a restore gate opened) go through
here: one refused and only logged would leave its VM waiting for it."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from spotline.functions.deps import Deps
from spotline.shared.domain.errors import TransientError
from spotline.shared.retries import METADATA_WRITE, retried


def write_metadata(
    deps: Deps,
    zone: str,
    name: str,
    items: dict[str, str],
    unless: Callable[[dict[str, str]], bool] | None = None,
) -> None:
    """``Compute.set_metadata``, tried again while refused as transient.

    Raises:
        what ``set_metadata`` raises otherwise (a VM gone), or its last
        ``TransientError`` past the deadline.
    """
    retried(
        partial(deps.compute.set_metadata, zone, name, items, unless),
        lambda err: isinstance(err, TransientError),
        METADATA_WRITE,
    )
