"""Where the CLI writes: a rich console for people, JSON for scripts."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console


def console() -> Console:
    """stdout as rich sees it: the terminal's width (``COLUMNS`` wins), colors
    only on a terminal, none with ``NO_COLOR``; no guessing of colors for
    numbers and words in plain text."""
    return Console(highlight=False, soft_wrap=False)


def print_json(value: Any) -> None:
    """One JSON document on stdout: what ``--json`` prints, for scripts."""
    print(json.dumps(value, indent=2, ensure_ascii=False))
