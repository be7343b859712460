"""Waiting, before the trainer restores, for the lost attempt's VMs to be
gone (``spotline.shared.domain.restore_gate``): a save they finish late
would otherwise be missed. The agent gears up meanwhile; only the trainer's
start waits."""

from __future__ import annotations

import math
import time

from spotline.shared import logs
from spotline.shared.domain.vms import (
    RESTORE_GO,
    RESTORE_METADATA_KEY,
    RESTORE_UNTIL,
    RESTORE_WAIT,
)
from spotline.vm_image.agent.metadata import Metadata, MetadataError

RESTORE_ATTRIBUTE = f"instance/attributes/{RESTORE_METADATA_KEY}"
# Each hanging read's bound (the metadata server answers the value at its end).
_WAIT_STEP_S = 60.0


def await_restore(metadata: Metadata, wait_s: float) -> bool:
    """Block until the VM's restore gate reads ``RESTORE_GO``, at most
    ``wait_s``. A VM made with no gate (no earlier VM was left saving)
    returns at once: the metadata server says the item is absent; a read
    that failed says nothing, and the gate is read again. False: the bound
    passed first; by then no save of a lost VM can still be under way, so
    the trainer starts anyway."""
    deadline = time.monotonic() + wait_s
    read = _first_read(metadata, deadline)
    if read is None:
        return True  # no gate
    value, etag = read
    while value != RESTORE_GO:
        remaining = min(deadline - time.monotonic(), _until(value) - time.time())
        if remaining <= 0:
            logs.warning(f"the restore gate stayed shut ({value}); restoring anyway")
            return False
        try:
            value, etag = metadata.wait_for_change(
                RESTORE_ATTRIBUTE, etag, timeout_s=max(min(remaining, _WAIT_STEP_S), 1.0)
            )
        except MetadataError as err:
            logs.warning(f"reading the restore gate failed: {err}")
            time.sleep(min(1.0, max(remaining, 0.0)))
    return True


def _first_read(metadata: Metadata, deadline: float) -> tuple[str, str] | None:
    """The gate's value and ETag, read again while the server does not
    answer (shut until it does: ``RESTORE_WAIT`` once ``deadline`` passed).
    None: the server says the item is absent (no gate)."""
    while True:
        try:
            return metadata.get_with_etag(RESTORE_ATTRIBUTE)
        except MetadataError as err:
            if err.absent:
                return None
            logs.warning(f"reading the restore gate failed: {err}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return RESTORE_WAIT, ""
            time.sleep(min(1.0, remaining))


def _until(value: str) -> float:
    """The UNIX time the gate names as its latest (``wait-until-T``): the
    notice's end of the VMs it waits for; inf when it names none."""
    prefix = f"{RESTORE_WAIT}{RESTORE_UNTIL}"
    try:
        return float(value.removeprefix(prefix)) if value.startswith(prefix) else math.inf
    except ValueError:
        return math.inf
