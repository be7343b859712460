"""The CLI's config file: where ``spotline deploy`` leaves the deployed project.

A small JSON object of setting names to values (``spotline deploy`` writes
project, region, zones and storage_root), so that ``spotline status``, ``logs``,
``cancel`` and ``submit`` find the project afterwards with no environment
variable. The environment still wins over it, setting by setting.

Where it lives, from the environment given: ``$SPOTLINE_CONFIG``, else
``$XDG_CONFIG_HOME/spotline/config.json``, else ``$HOME/.config/spotline/config.json``.
An environment naming none of the three (a test's explicit mapping) has no file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONFIG_VARIABLE = "SPOTLINE_CONFIG"


def config_path(env: Mapping[str, str]) -> Path | None:
    """Where the config file is (it may not exist), or None if ``env`` names no place."""
    if env.get(CONFIG_VARIABLE):
        return Path(env[CONFIG_VARIABLE]).expanduser()
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]) / "spotline" / "config.json"
    if env.get("HOME"):
        return Path(env["HOME"]) / ".config" / "spotline" / "config.json"
    return None


def write_config(path: Path, values: Mapping[str, Any]) -> None:
    """Replace the file with ``values``, atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(dict(values), indent=2, sort_keys=True) + "\n")
    partial.replace(path)
