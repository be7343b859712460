"""The contract every test keeps with Google's published API definitions: no
request the suite sends to a local Google API may break its discovery document
(``spotline.infra.localcloud.discovery``), even where the caller swallowed the
400 the double answered."""

from __future__ import annotations

from spotline.infra.localcloud.discovery import Violation


def broken_contract(seen: list[Violation]) -> str | None:
    """Why a test that sent the requests ``seen`` refused must fail, or None."""
    if not seen:
        return None
    lines = [f"  {v.method} {v.path} ({v.api}): {v.message}" for v in seen]
    return (
        "requests broke Google's published API definitions (fix the request, or "
        "ask for the `wire_violations` fixture where a test sends them on purpose):\n"
        + "\n".join(lines)
    )
