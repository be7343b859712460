"""Shared fixtures: the real emulators, started once per test session.

Each test gets its own project id, which the emulators keep apart, so tests
never see each other's documents or topics.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.emulators import Emulator, emulators_available, start_firestore, start_pubsub

_MISSING = emulators_available()


def pytest_report_header() -> list[str]:
    if _MISSING:
        return [f"!!! EMULATOR TESTS WILL BE SKIPPED: {_MISSING} !!!"]
    return ["emulators: Firestore and Pub/Sub from the Google Cloud CLI"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _MISSING:
        terminalreporter.write_line(
            f"!!! EMULATOR TESTS WERE SKIPPED: {_MISSING} !!!", red=True, bold=True
        )


@pytest.fixture(scope="session")
def emulators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Emulator, Emulator]]:
    if _MISSING:
        print(f"\n!!! SKIPPING EMULATOR TESTS: {_MISSING} !!!", file=sys.stderr)
        pytest.skip(f"emulators unavailable: {_MISSING}")
    logs = tmp_path_factory.mktemp("emulator-logs")
    firestore = start_firestore(logs)
    pubsub = start_pubsub(logs, "spotline-test")
    try:
        firestore.wait_ready()
        pubsub.wait_ready()
        yield firestore, pubsub
    finally:
        pubsub.stop()
        firestore.stop()


@pytest.fixture
def project(emulators: tuple[Emulator, Emulator], monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh project id on the emulators, set in the environment."""
    firestore, pubsub = emulators
    name = f"test-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore.host)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub.host)
    monkeypatch.setenv("SPOTLINE_PROJECT", name)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", name)
    return name


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_leaked_env() -> Iterator[None]:
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)
