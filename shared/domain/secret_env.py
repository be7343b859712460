"""Secrets in a job's ``env``: which names count as secret, the Secret Manager
references that stand in for their values, and masking for what is shown.

A job spec is kept whole in Firestore (``jobs/{id}.spec``), in the VM's
metadata and in every resubmission (``spotline replay``), and parts of it reach
logs. A secret's *value* must be in none of them, and silently dropping it
would leave a retried attempt without it. So a variable whose name looks
secret must hold a reference, ``sm://...``, which the VM's agent resolves
through Secret Manager just before it starts the trainer; a literal value is
refused at submission (``spotline.shared.domain.admission``).

Pure: no Google client here. The agent's resolution is in
``vm_image/agent/secrets.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The one list of what makes a variable's name secret: it contains one of
# these, in any case. TOKEN must not run on into a letter, so that
# TOKENIZERS_PARALLELISM (Hugging Face's everyday switch) stays plain, while
# HF_TOKEN, GITHUB_TOKEN and TOKEN_FILE are secret.
SECRET_NAME_WORDS = (
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "API_KEY",
    "APIKEY",
    "PRIVATE_KEY",
    "ACCESS_KEY",
    "CREDENTIAL",
)
SECRET_NAME = re.compile(
    "|".join(word + ("(?![A-Z])" if word == "TOKEN" else "") for word in SECRET_NAME_WORDS),
    re.IGNORECASE,
)
MASK = "***"
REFERENCE_PREFIX = "sm://"
# Secret Manager's own limits: a secret id is 1-255 letters, digits, "-" and
# "_"; a project is its id or its number; a version is a number or "latest".
_SECRET_ID = r"[A-Za-z0-9_-]{1,255}"
_PROJECT = r"[a-z][-a-z0-9]{4,28}[a-z0-9]|[0-9]{1,20}"
_VERSION = r"latest|[1-9][0-9]{0,18}"
_FULL = re.compile(
    rf"projects/(?P<project>{_PROJECT})/secrets/(?P<secret>{_SECRET_ID})"
    rf"(?:/versions/(?P<version>{_VERSION}))?"
)
_SHORT = re.compile(rf"(?P<secret>{_SECRET_ID})")
REFERENCE_FORMS = (
    "sm://NAME (a secret of the job's project, its latest version) or "
    "sm://projects/PROJECT/secrets/NAME/versions/VERSION"
)


def is_secret_name(name: str) -> bool:
    """Whether a variable named ``name`` must get its value through Secret Manager."""
    return SECRET_NAME.search(name) is not None


@dataclass(frozen=True)
class SecretRef:
    """One secret version in Secret Manager; ``project`` None: the job's project."""

    secret: str
    project: str | None = None
    version: str = "latest"

    def resource(self, default_project: str) -> str:
        """Its name in Secret Manager's REST API."""
        project = self.project or default_project
        return f"projects/{project}/secrets/{self.secret}/versions/{self.version}"


def is_reference(value: str) -> bool:
    return value.startswith(REFERENCE_PREFIX)


def reads_secrets(env: Mapping[str, str]) -> bool:
    """Whether a job with this env needs its VM to read Secret Manager."""
    return any(is_reference(value) for value in env.values())


def parse_reference(value: str) -> SecretRef:
    """The secret an ``sm://`` value names.

    Raises:
        ValueError: the value starts with ``sm://`` but names no secret.
    """
    body = value[len(REFERENCE_PREFIX) :] if is_reference(value) else None
    if body is not None and (found := _FULL.fullmatch(body)):
        return SecretRef(found["secret"], found["project"], found["version"] or "latest")
    if body is not None and _SHORT.fullmatch(body):
        return SecretRef(body)
    raise ValueError(f"{value[:80]!r} is not a Secret Manager reference: use {REFERENCE_FORMS}")


def env_refusals(env: Mapping[str, str]) -> list[str]:
    """Why ``env`` cannot be taken, one line per variable; never the value.

    A secret-like name with a literal value is refused (the value would be
    stored in Firestore and metadata); a malformed reference is refused
    whatever the name (it would fail on the VM, after a VM was paid for).
    """
    problems = []
    for name, value in env.items():
        if is_reference(value):
            try:
                parse_reference(value)
            except ValueError as err:
                problems.append(f"env.{name}: {err}")
        elif is_secret_name(name):
            problems.append(
                f"env.{name}: the name looks like a secret, and spotline stores env values in "
                "Firestore and the VM's metadata, so it does not take a literal value here. "
                "Put the value in Secret Manager and give its reference: "
                f"{name}={REFERENCE_FORMS}; "
                "let the VMs' service account read that secret "
                "(roles/secretmanager.secretAccessor); in the per-user mode, name it "
                "spotline-u-USER_..., which your own VMs' account reads already "
                "(docs: Submitting jobs, Secrets)"
            )
    return problems


def masked_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` to show: a secret-like name's value is ``***`` unless it is a
    reference (which is no secret, and tells the reader where the value is)."""
    return {
        name: value if is_reference(value) or not is_secret_name(name) else MASK
        for name, value in env.items()
    }


# "NAME": "value" in JSON text, the value possibly cut off by a truncation.
_JSON_PAIR = re.compile(r'"((?:[^"\\]|\\.)*)"(\s*:\s*)"((?:[^"\\]|\\.)*)("|$)')


def masked_payload(text: str) -> str:
    """A submitted message's text with the value of every secret-like
    ``env`` variable replaced by ``***``, to be logged or kept.

    A JSON object is re-written with its ``env`` masked; anything else (cut
    short, not JSON) has every ``"NAME": "value"`` pair with a secret-like
    NAME masked, wherever it is.
    """
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("env"), dict):
        data["env"] = {
            name: masked_env({name: value})[name] if isinstance(value, str) else value
            for name, value in data["env"].items()
        }
        return json.dumps(data)

    def mask(found: re.Match[str]) -> str:
        name, colon, value, end = found.groups()
        if is_secret_name(name) and not is_reference(value):
            value = MASK
        return f'"{name}"{colon}"{value}{end}'

    return _JSON_PAIR.sub(mask, text)


def scrub(text: str, values: list[str]) -> str:
    """``text`` with each of ``values`` (resolved secrets) replaced by ``***``;
    the longest first, so that a secret holding another is masked whole."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def masked_start(data: bytes, chars: int, whole_up_to: int = 64 * 1024) -> str:
    """The first ``chars`` characters of a published message, masked
    (``masked_payload``): read whole when it is at most ``whole_up_to`` bytes
    (a spec's size), else only its start, so a huge message costs no parse."""
    part = data if len(data) <= whole_up_to else data[: chars * 4]
    return masked_payload(part.decode("utf-8", errors="replace"))[:chars]
