"""Resolving a job's ``sm://`` env values through Secret Manager, on the VM,
just before the trainer starts.

Only the reference is stored anywhere (the job document, the VM's metadata);
the value lives in the trainer's environment and nowhere else: the agent
masks it in what it relays of the trainer's output (``secret_env.scrub``).

Secret Manager's REST API (no client library: one GET per secret):
``GET {endpoint}/v1/projects/P/secrets/S/versions/V:access`` with the VM's
own access token from the metadata server; the answer's ``payload.data`` is
the value, base64. ``SPOTLINE_SECRETMANAGER_ENDPOINT`` points it elsewhere
(the local stack, tests). The VM's service account needs
``roles/secretmanager.secretAccessor`` on each secret (docs/guides/submitting.md, Secrets).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping

from spotline.shared.domain.secret_env import is_reference, parse_reference
from spotline.vm_image.agent.metadata import Metadata, MetadataError

ENDPOINT_ENV = "SPOTLINE_SECRETMANAGER_ENDPOINT"
DEFAULT_ENDPOINT = "https://secretmanager.googleapis.com"
TOKEN_PATH = "instance/service-accounts/default/token"
_TIMEOUT_S = 30.0


class SecretUnavailable(RuntimeError):
    """A referenced secret could not be read: the message names the variable
    and the secret, never a value."""


def resolve_env(
    env: Mapping[str, str],
    project: str,
    metadata: Metadata,
    endpoint: str | None = None,
) -> dict[str, str]:
    """The value of every ``sm://`` variable of ``env``, by name (only those).

    Raises:
        SecretUnavailable: a token or a secret could not be had.
    """
    references = {name: value for name, value in env.items() if is_reference(value)}
    if not references:
        return {}
    base = (endpoint or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT).rstrip("/")
    token = _access_token(metadata, sorted(references))
    values = {}
    for name, value in references.items():
        try:
            resource = parse_reference(value).resource(project)
        except ValueError as err:  # admission refuses these; an old spec may not be checked
            raise SecretUnavailable(f"env {name}: {err}") from None
        values[name] = _access(base, resource, token, name)
    return values


def _access_token(metadata: Metadata, names: list[str]) -> str:
    try:
        return str(json.loads(metadata.get(TOKEN_PATH))["access_token"])
    except (MetadataError, ValueError, KeyError, TypeError) as err:
        raise SecretUnavailable(
            f"env {', '.join(names)}: no access token from the metadata server to read "
            f"Secret Manager with: {err}"
        ) from None


def _access(base: str, resource: str, token: str, name: str) -> str:
    request = urllib.request.Request(
        f"{base}/v1/{resource}:access",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    where = f"env {name}: cannot read the secret {resource}"
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as err:
        hint = (
            " (the VM's service account needs roles/secretmanager.secretAccessor on it,"
            " and the VM the cloud-platform scope)"
            if err.code in (401, 403)
            else " (no such secret or version)"
            if err.code == 404
            else ""
        )
        raise SecretUnavailable(f"{where}: HTTP {err.code}{hint}") from None
    except (urllib.error.URLError, TimeoutError, ValueError) as err:
        raise SecretUnavailable(f"{where}: {err}") from None
    try:
        data = base64.b64decode(body["payload"]["data"], validate=True)
    except (KeyError, TypeError, binascii.Error):
        raise SecretUnavailable(f"{where}: the answer has no payload.data") from None
    # An environment value is bytes to the OS: bytes that are not UTF-8 pass
    # through unchanged (Popen encodes with surrogateescape).
    return data.decode("utf-8", errors="surrogateescape")
