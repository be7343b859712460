"""mkdocs hook: fills each ``<!-- spotline:NAME -->`` marker of a page with the
reference rendered from the code (``spotline.infra.cli.reference``), so the
reference pages are the declarations themselves, never a copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spotline.infra.cli import reference

RENDERERS: dict[str, Callable[[], str]] = {
    "spec": reference.spec_markdown,
    "cli": reference.cli_markdown,
    "settings": reference.settings_markdown,
    "events": reference.events_markdown,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    for name, render in RENDERERS.items():
        marker = f"<!-- spotline:{name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown
