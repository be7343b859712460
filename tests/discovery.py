"""Google's published API definitions, read from the discovery documents that
``google-api-python-client`` (a dev dependency) ships, never copied here."""

from __future__ import annotations

from typing import Any

from spotline.infra.localcloud import discovery


def document(api: str, version: str = "v1") -> dict[str, Any]:
    """The discovery document of ``api`` (``compute``, ``iam``...)."""
    return discovery.document(api, version)


def enum(api: str, schema: str, field: str) -> list[str]:
    """The values the API's ``schema.field`` may take, as the document lists them."""
    values: list[str] = document(api)["schemas"][schema]["properties"][field]["enum"]
    return values
