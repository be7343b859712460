"""The documentation's examples, copied out and run as a reader runs them: a
script of its own, spotline found through ``SPOTLINE_WORKDIR`` (the local
stack's folder) with none of the stack's variables set.

An example is named by its page (``README.md``, ``docs/...md``) and the
heading it sits under, so a test fails, naming both, when either moves."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from spotline.infra.localstack.stack import LocalStack

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def section(page: str, heading: str) -> str:
    """The text of ``page`` (relative to the repository's root) under
    ``heading`` (its whole line, e.g. ``## Quick start``), up to the next
    heading of its level or above."""
    text = (ROOT / page).read_text()
    marker = f"\n{heading}\n"
    if marker not in f"\n{text}":
        raise AssertionError(f"{page} has no heading {heading!r}")
    start = f"\n{text}".index(marker)
    level = len(heading.split(" ", 1)[0])
    lines = text[start:].splitlines(keepends=True)
    fenced, end = False, len(lines)
    for number, line in enumerate(lines[1:], start=1):
        if line.startswith("```"):
            fenced = not fenced
        # A comment in a code block ("# ...") is no heading.
        marks = len(line) - len(line.lstrip("#"))
        if not fenced and 0 < marks <= level and line[marks : marks + 1] == " ":
            end = number
            break
    return "".join(lines[:end])


def blocks(page: str, heading: str, lang: str) -> list[str]:
    """The ``lang`` code blocks of ``page``'s section under ``heading``."""
    return [body for kind, body in FENCE.findall(section(page, heading)) if kind == lang]


def page_blocks(page: str, lang: str) -> list[str]:
    """Every ``lang`` code block of ``page``."""
    return [body for kind, body in FENCE.findall((ROOT / page).read_text()) if kind == lang]


def run_python(
    stack: LocalStack, code: str, folder: Path, cwd: Path | None = None, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    """``code`` as a script in ``folder``, run from ``cwd`` (default ``folder``)."""
    script = folder / "example.py"
    script.write_text(code)
    stacks = set(stack.client_env())
    env = {name: value for name, value in os.environ.items() if name not in stacks}
    env["SPOTLINE_WORKDIR"] = str(stack.workdir)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd or folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
