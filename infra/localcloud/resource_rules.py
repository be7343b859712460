"""Compute Engine's documented limits on what an instance carries, checked on
every insert, bulk insert and ``setMetadata`` of the local cloud.

* Labels (https://cloud.google.com/compute/docs/labeling-resources): at most
  64; a key 1-63 characters, starting with a lowercase letter (or an
  international one); a value 0-63 characters; both only lowercase letters,
  digits, ``_`` and ``-`` (international characters allowed).
* Custom metadata (https://cloud.google.com/compute/docs/metadata/setting-custom-metadata):
  a key 1-128 characters of letters, digits, ``-`` and ``_``, each key once; a
  value at most 256 KB; all entries together at most 512 KB.
* ``requestId``: a UUID other than the zero UUID (the discovery document's
  words); Compute Engine keeps it at least 60 minutes.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping

from spotline.infra.localcloud.errors import Invalid

MAX_LABELS = 64
LABEL_LENGTH = 63
METADATA_KEY = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
METADATA_VALUE_BYTES = 256 * 1024
METADATA_TOTAL_BYTES = 512 * 1024
LABEL_KEY_FORMAT = (
    "The key must start with a lowercase character, can only contain lowercase letters, "
    "numeric characters, underscores and dashes. The key can be at most 63 characters "
    "long. International characters are allowed."
)
LABEL_VALUE_FORMAT = (
    "The value can only contain lowercase letters, numeric characters, underscores and "
    "dashes. The value can be at most 63 characters long. International characters are "
    "allowed."
)


def _label_char(c: str) -> bool:
    return c in "_-" or c.isdigit() or c.islower() or (not c.isascii() and c.isalpha())


def check_labels(labels: Mapping[str, str]) -> None:
    """Raises ``Invalid`` for labels Compute Engine refuses."""
    if len(labels) > MAX_LABELS:
        raise Invalid(
            f"Invalid value for field 'resource.labels': ''. Resource cannot have more "
            f"than {MAX_LABELS} labels."
        )
    for key, value in labels.items():
        starts = bool(key) and (key[0].islower() or (not key[0].isascii() and key[0].isalpha()))
        if not starts or len(key) > LABEL_LENGTH or not all(map(_label_char, key)):
            raise Invalid(
                f"Invalid value for field 'resource.labels': ''. Label key '{key}' violates "
                "format constraints. " + LABEL_KEY_FORMAT
            )
        if len(value) > LABEL_LENGTH or not all(map(_label_char, value)):
            raise Invalid(
                f"Invalid value for field 'resource.labels': ''. Label value '{value}' "
                "violates format constraints. " + LABEL_VALUE_FORMAT
            )


def check_metadata(items: Iterable[tuple[str, str]]) -> None:
    """Raises ``Invalid`` for metadata items Compute Engine refuses."""
    seen: set[str] = set()
    total = 0
    for key, value in items:
        if not METADATA_KEY.match(key):
            raise Invalid(
                f"Invalid value for field 'resource.metadata.items[].key': '{key}'. Must be "
                "1-128 characters of letters, digits, '-' and '_'."
            )
        if key in seen:
            raise Invalid(f"Invalid value for field 'resource.metadata': Duplicate key '{key}'.")
        seen.add(key)
        size = len(value.encode())
        if size > METADATA_VALUE_BYTES:
            raise Invalid(
                f"Invalid value for field 'resource.metadata.items[].value': the value of "
                f"'{key}' is {size} bytes; the limit is {METADATA_VALUE_BYTES}."
            )
        total += len(key.encode()) + size
    if total > METADATA_TOTAL_BYTES:
        raise Invalid(
            f"Invalid value for field 'resource.metadata': the metadata is {total} bytes; "
            f"the limit is {METADATA_TOTAL_BYTES} for all entries together."
        )


def check_request_id(request_id: str) -> None:
    """Raises ``Invalid`` for a ``requestId`` that is not a non-zero UUID."""
    try:
        parsed = uuid.UUID(request_id)
    except ValueError:
        parsed = None
    if parsed is None or parsed.int == 0 or len(request_id) != 36:
        raise Invalid(
            f"Invalid value for field 'requestId': '{request_id}'. The request ID must be "
            "a valid UUID with the exception that zero UUID is not supported "
            "(00000000-0000-0000-0000-000000000000)."
        )
