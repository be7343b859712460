"""Google's published API definitions, read from the discovery documents that
``google-api-python-client`` (a dev dependency) ships, never copied here."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def document(api: str, version: str = "v1") -> dict[str, Any]:
    """The discovery document of ``api`` (``compute``, ``iam``...)."""
    folder = resources.files("googleapiclient").joinpath("discovery_cache/documents")
    loaded: dict[str, Any] = json.loads(folder.joinpath(f"{api}.{version}.json").read_text())
    return loaded


def enum(api: str, schema: str, field: str) -> list[str]:
    """The values the API's ``schema.field`` may take, as the document lists them."""
    values: list[str] = document(api)["schemas"][schema]["properties"][field]["enum"]
    return values
