"""A small client of the GCE metadata server (or the local stand-in).

``GCE_METADATA_HOST`` points it elsewhere, as it does google-auth; locally
each "VM" gets its own metadata server on loopback.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request

_HEADERS = {"Metadata-Flavor": "Google"}
_DEFAULT_HOST = "metadata.google.internal"


class MetadataError(RuntimeError):
    """A read that failed: the item is absent (``absent``: the server said
    404), or the server did not answer as it should."""

    def __init__(self, message: str, absent: bool = False) -> None:
        super().__init__(message)
        self.absent = absent


class Metadata:
    def __init__(self, host: str | None = None, timeout_s: float = 10.0) -> None:
        self.host = host or os.environ.get("GCE_METADATA_HOST") or _DEFAULT_HOST
        self.timeout_s = timeout_s

    def get(self, path: str) -> str:
        value, _ = self._fetch(path, {})
        return value

    def get_with_etag(self, path: str) -> tuple[str, str]:
        return self._fetch(path, {})

    def wait_for_change(
        self, path: str, last_etag: str | None = None, timeout_s: float = 60.0
    ) -> tuple[str, str]:
        """Block until the value's ETag differs from ``last_etag`` (or the
        server's timeout passes); return (value, etag). No polling: the server
        holds the request open, which is how GCE announces a preemption."""
        query = {"wait_for_change": "true", "timeout_sec": str(int(timeout_s))}
        if last_etag:
            query["last_etag"] = last_etag
        return self._fetch(path, query, timeout_s=timeout_s + 5)

    def _fetch(
        self, path: str, query: dict[str, str], timeout_s: float | None = None
    ) -> tuple[str, str]:
        url = f"http://{self.host}/computeMetadata/v1/{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = urllib.request.Request(url, headers=_HEADERS)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                return response.read().decode(), response.headers.get("ETag", "")
        except (urllib.error.URLError, TimeoutError) as err:
            absent = isinstance(err, urllib.error.HTTPError) and err.code == 404
            raise MetadataError(f"metadata {path}: {err}", absent) from err
