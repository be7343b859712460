"""The store port's contract (tests/store_contract.py) on ``InMemoryStore``."""

from __future__ import annotations

import pytest

from tests.store_contract import *  # noqa: F403  (the contract's tests, collected here)
from tests.store_contract import Backend, memory_backend


@pytest.fixture
def backend() -> Backend:
    return memory_backend()
