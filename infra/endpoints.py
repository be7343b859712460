"""Where each Google API is reached and the options a client is built with
(deploy's clients, and the API's Cloud Logging reads).

Every endpoint is Google's unless overridden (``SPOTLINE_<API>_ENDPOINT``):
tests point the clients at local doubles, and ``http://`` endpoints are called
with no credentials unless some are given (a double that tells a user's token
from a service account's). Pub/Sub and Firestore data go to their emulators through
the usual ``*_EMULATOR_HOST`` variables; ``pubsub`` here is Pub/Sub's REST API
for topic and subscription IAM policies, which the emulator does not serve.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.auth.credentials import Credentials


@dataclass(frozen=True)
class Endpoints:
    """API endpoints in place of Google's (None: Google's)."""

    functions: str | None = None
    scheduler: str | None = None
    eventarc: str | None = None
    service_usage: str | None = None
    resource_manager: str | None = None
    iam: str | None = None
    storage: str | None = None
    logging: str | None = None
    firestore_admin: str | None = None
    pubsub: str | None = None
    firebase_rules: str | None = None
    # Deploy's: the VMs' network and firewall (the functions' VMs: Settings.compute_endpoint).
    compute: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Endpoints:
        env = os.environ if env is None else env
        return cls(
            **{f.name: env.get(f"SPOTLINE_{f.name.upper()}_ENDPOINT") or None for f in fields(cls)}
        )

    @classmethod
    def everywhere(cls, endpoint: str) -> Endpoints:
        """One endpoint for every API (a double that serves them all)."""
        return cls(**{f.name: endpoint for f in fields(cls)})


def client_options(endpoint: str | None, credentials: Credentials | None) -> dict[str, Any]:
    """``credentials`` and ``client_options`` for a client library's constructor."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    if endpoint is None:
        return {"credentials": credentials}
    local = endpoint.startswith("http://")
    return {
        "credentials": (credentials or AnonymousCredentials()) if local else credentials,
        "client_options": ClientOptions(api_endpoint=endpoint),
    }
