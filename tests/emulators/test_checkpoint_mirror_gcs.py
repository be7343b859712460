"""The agent's mirror of a trainer's local folder (tests/checkpoint_mirror.py)
on the Cloud Storage emulator, through gcsfs."""

from __future__ import annotations

import pytest

from tests.checkpoint_mirror import *  # noqa: F403  (the mirror's tests, collected here)


@pytest.fixture
def url(gcs: str) -> str:
    return gcs
