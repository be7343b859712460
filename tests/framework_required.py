"""Skip a test loudly where an optional framework is missing (``make ray``,
``make xgboost``, ``make jax`` install them): a skip nobody notices hides a broken install."""

from __future__ import annotations

import importlib.util
import sys
import warnings

import pytest


def require_framework(module: str, what: str, make_target: str) -> None:
    """Skip the calling test unless ``module`` is importable, saying so loudly."""
    message = (
        f"!!! {what} SKIPPED: {module} is not installed here; make {make_target} installs it !!!"
    )
    if importlib.util.find_spec(module) is None:
        print(f"\n{message}", file=sys.stderr)
        warnings.warn(message, stacklevel=2)
        pytest.skip(message)


def require_modules(modules: tuple[str, ...], what: str, make_target: str) -> None:
    """Skip the calling test module unless every one of ``modules`` is
    importable, saying so loudly; call it before importing them."""
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        message = (
            f"!!! {what} SKIPPED: {', '.join(missing)} not installed here; "
            f"make {make_target} installs them !!!"
        )
        print(f"\n{message}", file=sys.stderr)
        warnings.warn(message, stacklevel=2)
        pytest.skip(message, allow_module_level=True)
