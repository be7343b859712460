"""A packed folder uploaded under the deployment's storage, by the address of
its content (``packing``): ``{storage_root}/code/{sha256}/files/`` for code,
``data/{sha256}/files/`` for data, which is what the job's ``code_uri`` or
``data_uri`` names (the VM copies every object under it: agent.py
``_fetch_code``, job_data.py).

Beside the files, ``manifest.json`` lists them (``shared/contract/uploads.py``:
the agent gives executable files their mode back from it); it is written last, so an
upload cut short is never taken for a whole one, and checked first, so an
unchanged folder is not uploaded again. Objects are only ever written with the
content their address names, so two uploads of one folder at once, or one
after another cut short, write the same bytes and need no cleaning up.

In the cloud the VMs' account reads these prefixes and writes none of them
(infra/deploy/iam.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotline.infra.client.errors import InputsError
from spotline.shared.contract.uploads import FILES, MANIFEST, PREFIXES

if TYPE_CHECKING:
    from spotline.infra.client.packing import Pack

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Shipped:
    """Where a pack went, and how many files this upload wrote (0: it was there)."""

    uri: str  # the job's code_uri or data_uri
    written: int


def pack_uri(storage_root: str, field: str, pack: Pack) -> str:
    """Where ``pack``'s files live, as the job's ``field`` names them."""
    return f"{_pack_root(storage_root, field, pack)}/{FILES}"


def _pack_root(storage_root: str, field: str, pack: Pack) -> str:
    return f"{storage_root.rstrip('/')}/{PREFIXES[field]}/{pack.digest}"


def ship(storage_root: str, field: str, pack: Pack) -> Shipped:
    """Upload ``pack`` unless a whole upload of it is there already.

    Raises:
        InputsError: a file changed since it was packed.
        OSError: storage refused a write (its message says why).
    """
    from fsspec.core import url_to_fs

    root = _pack_root(storage_root, field, pack)
    fs, base = url_to_fs(root)
    marker = f"{base}/{MANIFEST}"
    fs.invalidate_cache(base)
    if fs.exists(marker):
        return Shipped(pack_uri(storage_root, field, pack), 0)
    for packed in pack.files:
        destination = f"{base}/{FILES}/{packed.path}"
        fs.makedirs(destination.rsplit("/", 1)[0], exist_ok=True)
        digest = hashlib.sha256()
        with (pack.folder / packed.path).open("rb") as read, fs.open(destination, "wb") as write:
            while chunk := read.read(_CHUNK):
                digest.update(chunk)
                write.write(chunk)
        if digest.hexdigest() != packed.sha256:  # the address would name other bytes
            fs.rm(destination)
            raise InputsError(
                f"{pack.folder / packed.path} changed while it was uploaded; submit again"
            )
    with fs.open(marker, "w") as out:
        out.write(json.dumps(pack.manifest(), indent=1))
    return Shipped(pack_uri(storage_root, field, pack), len(pack.files))
