"""Bounds on what a message may carry, shared by the job spec and the VM's events.

Anything published to a topic is untrusted: a value a handler cannot store or
compute with must fail validation, with the field named, instead of raising
later (a redelivery storm). The outside limits that set these bounds:

* Firestore: integers are int64; a map or array nests at most 20 deep; an
  array cannot hold an array; a map key is not empty and not ``__.*__``; a
  document id has no ``/``, is not ``.``, ``..`` or ``__.*__``; a document is
  1 MiB at most.
* Compute Engine: a VM name is 1-63 lowercase letters, digits and hyphens; a
  metadata value (where the spec travels as the VM's assignment) is 256 KB.
* Python: ``timedelta`` overflows past 999999999 days, and ``datetime``
  conversions near year 1 or 9999.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, Field

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
DAY_S = 24 * 3600
MAX_PERIOD_S = 30 * DAY_S  # waits, cooling and stopped periods
MAX_RUNTIME_S = 366 * DAY_S
MAX_EPOCHS = 100_000
MAX_STEP = 10**12  # optimizer steps: far beyond any run, far below int64
MAX_ATTEMPTS = 1_000
# A job id ends up in VM names (``sl-{job_id}-a{attempt}-n{rank}``) and labels.
JOB_ID_PATTERN = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
# Compute Engine's resource names: VM names, zones.
VM_NAME_PATTERN = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
ZONE_PATTERN = r"^([a-z][-a-z0-9]{0,61}[a-z0-9])?$"
MAX_URI_CHARS = 2048
# The spec, as JSON: well under the 256 KB metadata value it travels in (with
# the assignment around it) and the 1 MiB job document it is copied into.
MAX_SPEC_BYTES = 64 * 1024
# Free-form JSON in the spec (hyperparameters, fit_kwargs): the job document
# holds it three maps deep, Firestore allows 20.
MAX_JSON_DEPTH = 10
MAX_KEY_CHARS = 256
MAX_METRICS = 100
# Timestamps a VM reports: timezone-aware, and in a range where every
# conversion and subtraction stays valid.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)

_RESERVED_KEY = re.compile(r"^__.*__$", re.DOTALL)


def _in_range(value: datetime) -> datetime:
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"must be between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d}")
    return value.astimezone(UTC)


Timestamp = Annotated[AwareDatetime, AfterValidator(_in_range)]
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
Step = Annotated[int, Field(ge=0, le=MAX_STEP)]
Attempt = Annotated[int, Field(ge=1, le=MAX_ATTEMPTS)]
JobId = Annotated[str, Field(pattern=JOB_ID_PATTERN)]
VmName = Annotated[str, Field(pattern=VM_NAME_PATTERN)]
Zone = Annotated[str, Field(pattern=ZONE_PATTERN)]
Uri = Annotated[str, Field(max_length=MAX_URI_CHARS)]


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a map key in a Firestore document, or None."""
    if not key:
        return "a key must not be empty"
    if len(key) > MAX_KEY_CHARS:
        return f"the key {key[:20]!r}... is over {MAX_KEY_CHARS} characters"
    if _RESERVED_KEY.match(key):
        return f"the key {key!r} is reserved (keys may not look like __name__)"
    return None


def check_keys(value: dict[str, Any]) -> dict[str, Any]:
    for key in value:
        problem = key_problem(key)
        if problem is not None:
            raise ValueError(problem)
    return value


def json_problem(value: Any, where: str = "", depth: int = 1, in_list: bool = False) -> str | None:
    """Why a free-form JSON value cannot be stored in a Firestore document, or
    None; the reason names the place in ``value`` ("layers[0]: ...")."""
    at = f"{where}: " if where else ""
    if depth > MAX_JSON_DEPTH:
        return f"{at}nested more than {MAX_JSON_DEPTH} levels deep"
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return f"{at}the integer is outside the 64-bit range"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{at}{value} is not a finite number"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = key_problem(str(key))
            if problem is not None:
                return f"{at}{problem}"
            inner = f"{where}.{key}" if where else str(key)
            problem = json_problem(item, inner, depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(value, list):
        if in_list:
            return f"{at}a list inside a list cannot be stored; use a list of objects"
        for i, item in enumerate(value):
            problem = json_problem(item, f"{where}[{i}]", depth + 1, in_list=True)
            if problem is not None:
                return problem
        return None
    return f"{at}{type(value).__name__} is not a JSON value"
