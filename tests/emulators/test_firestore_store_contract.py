"""The store port's contract (tests/store_contract.py) on ``FirestoreStore``, on
the real Firestore emulator."""

from __future__ import annotations

import pytest

from tests.store_contract import *  # noqa: F403  (the contract's tests, collected here)
from tests.store_contract import Backend, firestore_backend


@pytest.fixture
def backend(project: str) -> Backend:
    return firestore_backend(project)
