"""Skip a test module loudly where TensorFlow is missing (``make tensorflow``
installs it; CI does): a skip nobody notices hides a broken install."""

from __future__ import annotations

import importlib.util
import sys
import warnings

import pytest


def require_tensorflow(what: str) -> None:
    """Call at the top of a module, before importing TensorFlow or Keras."""
    message = (
        f"!!! {what} SKIPPED: TensorFlow is not installed here; make tensorflow installs it !!!"
    )
    if importlib.util.find_spec("tensorflow") is None:
        # pytest captures stderr while collecting (the line shows with -s); the
        # warning and the skip reason reach the terminal summary in every run.
        print(f"\n{message}", file=sys.stderr)
        warnings.warn(message, stacklevel=2)
    pytest.importorskip("tensorflow", reason=message)
