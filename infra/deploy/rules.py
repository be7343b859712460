"""Firestore security rules that deny every client SDK request, put in force by
``spotline deploy`` and taken away by ``spotline destroy``.

Why: the functions use the server client library, authorized by IAM, to which
security rules do not apply; the web and mobile SDKs obey them. A database made
in test mode, or rules opened by hand, would let anyone who knows the project id
read and rewrite jobs through a client SDK. Denying all closes that door and
costs spotline nothing (``tests/emulators/test_firestore_rules.py`` shows both halves on
the Firestore emulator).

The Firebase Rules API keeps rules as rulesets (immutable source, given a
generated name) and releases (a name pointing at a ruleset); Firestore enforces
the ruleset of the release ``cloud.firestore``. So converging is: read the
release, read the ruleset it names, and only when its source is not this file,
create a ruleset and point the release at it (create, or patch its
``rulesetName``). A ruleset the release pointed at before stays in the project's
history, where the console can roll back to it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from spotline.infra.deploy.clients import ProjectClients

RULES_FILE = Path(__file__).with_name("firestore.rules")
RULES_NAME = "firestore.rules"
RELEASE = "cloud.firestore"  # the release Firestore's (default) database enforces
KIND = "rules"
DETAIL = "deny all client SDK access"

Record = Callable[[str, str, str, str], None]  # kind, name, action, detail


def rules_source() -> str:
    return RULES_FILE.read_text()


def ruleset_body(source: str) -> dict[str, Any]:
    return {"source": {"files": [{"name": RULES_NAME, "content": source}]}}


def sources(ruleset: dict[str, Any] | None) -> list[str]:
    """The contents of a ruleset's files ([] for none)."""
    files = ((ruleset or {}).get("source") or {}).get("files") or []
    return [str(f.get("content", "")) for f in files]


class FirestoreRules:
    """The ``cloud.firestore`` release of ``project``, through ``clients``.

    Args:
        clients: the project's clients (the Rules API over REST).
        dry_run: read only; ``record`` says what would change.
        record: called once per step with (kind, name, action, detail); the
            caller turns actions into their dry-run words.
    """

    def __init__(self, clients: ProjectClients, *, dry_run: bool, record: Record) -> None:
        self.clients = clients
        self.project = clients.project
        self.dry_run = dry_run
        self._record = record

    @property
    def release_name(self) -> str:
        return f"projects/{self.project}/releases/{RELEASE}"

    def current(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The release and the ruleset it names (each None where absent)."""
        release = self.clients.rules_call("GET", self.release_name, None, missing_ok=True)
        if release is None or not release.get("rulesetName"):
            return release, None
        ruleset = self.clients.rules_call("GET", release["rulesetName"], None, missing_ok=True)
        return release, ruleset

    def ensure(self) -> None:
        """Make the release point at a ruleset whose source is the rules file."""
        source = rules_source()
        release, ruleset = self.current()
        if release is not None and sources(ruleset) == [source]:
            self._record(KIND, RELEASE, "unchanged", release["rulesetName"].rsplit("/", 1)[-1])
            return
        action = "created" if release is None else "updated"
        if self.dry_run:
            self._record(KIND, RELEASE, action, DETAIL)
            return
        made = self.clients.rules_call(
            "POST", f"projects/{self.project}/rulesets", ruleset_body(source)
        )
        wanted = {"name": self.release_name, "rulesetName": (made or {})["name"]}
        if release is None:
            self.clients.rules_call("POST", f"projects/{self.project}/releases", wanted)
        else:
            # Only rulesetName may change; the body wraps the release (UpdateReleaseRequest).
            self.clients.rules_call("PATCH", self.release_name, {"release": wanted})
        self._record(
            KIND, RELEASE, action, f"{DETAIL} ({wanted['rulesetName'].rsplit('/', 1)[-1]})"
        )

    def delete(self) -> None:
        """Delete the release, then the ruleset it names (a ruleset a release
        names cannot be deleted). Rules spotline did not write are left in force."""
        release, ruleset = self.current()
        if release is None:
            self._record(KIND, RELEASE, "absent", "")
            return
        named = str(release.get("rulesetName", ""))
        if sources(ruleset) != [rules_source()]:
            self._record(KIND, RELEASE, "kept", f"it names {named}, rules spotline did not write")
            return
        if not self.dry_run:
            self.clients.rules_call("DELETE", self.release_name, None, missing_ok=True)
            self.clients.rules_call("DELETE", named, None, missing_ok=True)
        self._record(KIND, RELEASE, "deleted", f"and its ruleset {named.rsplit('/', 1)[-1]}")
