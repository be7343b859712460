"""Hostile input (tests/hostile_input.py) on the Firestore emulator: the cases
Firestore itself refuses, and the tests on a world."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spotline.functions import deps
from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters.firestore_store import FirestoreStore
from tests.hostile import World
from tests.hostile_input import *  # noqa: F403  (the tests on a world, collected here)
from tests.hostile_input import ON_FIRESTORE, hostile_messages


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    hostile_messages(metafunc, only=ON_FIRESTORE)


@pytest.fixture
def world(host: LocalCloud, project: str) -> Iterator[World]:
    """The local cloud (the environment pointed at it) and the Firestore emulator."""
    the_world = World(store=FirestoreStore(project), project=project, cloud=host)
    the_world.set_up()
    yield the_world
    deps.reset()
