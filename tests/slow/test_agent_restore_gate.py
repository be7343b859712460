"""The agent's wait before the trainer restores (``vm_image/agent/restore_gate``),
against the local cloud's real per-VM metadata server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from spotline.infra.localcloud.metadata_server import Identity, MetadataServer
from spotline.shared.domain.vms import (
    RESTORE_GO,
    RESTORE_METADATA_KEY,
    RESTORE_UNTIL,
    RESTORE_WAIT,
)
from spotline.vm_image.agent.metadata import Metadata
from spotline.vm_image.agent.restore_gate import await_restore


@pytest.fixture
def server() -> Iterator[MetadataServer]:
    identity = Identity("sl-j1-a2", "1234", "us-central1-a", "g2-standard-4", "p", "42")
    found = MetadataServer(identity, {})
    found.start()
    try:
        yield found
    finally:
        found.close()


def test_a_vm_made_with_no_gate_starts_at_once(server: MetadataServer) -> None:
    started = time.monotonic()
    assert await_restore(Metadata(server.host), wait_s=30)
    assert time.monotonic() - started < 10.0  # far from the 30 s it would wait, with room for load


@pytest.mark.slow
def test_the_trainer_waits_until_the_gate_opens(server: MetadataServer) -> None:
    server.set_attributes({RESTORE_METADATA_KEY: RESTORE_WAIT, "other": "x"})
    opener = threading.Timer(
        1.0, lambda: server.set_attributes({RESTORE_METADATA_KEY: RESTORE_GO, "other": "x"})
    )
    started = time.monotonic()
    opener.start()
    try:
        assert await_restore(Metadata(server.host), wait_s=30)
    finally:
        opener.cancel()
    assert 0.9 <= time.monotonic() - started < 15.0


@pytest.mark.slow
def test_another_items_change_does_not_open_it(server: MetadataServer) -> None:
    server.set_attributes({RESTORE_METADATA_KEY: RESTORE_WAIT})
    changer = threading.Timer(
        0.5, lambda: server.set_attributes({RESTORE_METADATA_KEY: RESTORE_WAIT, "other": "y"})
    )
    changer.start()
    started = time.monotonic()
    try:
        assert not await_restore(Metadata(server.host), wait_s=2.0)
    finally:
        changer.cancel()
    assert time.monotonic() - started >= 2.0


@pytest.mark.slow
def test_a_gate_naming_the_notices_end_waits_no_later(server: MetadataServer) -> None:
    """The VMs it waits for were kept through their notice: Compute Engine
    takes them at its end, and no one may be there to see it."""
    until = f"{RESTORE_WAIT}{RESTORE_UNTIL}{int(time.time()) + 2}"
    server.set_attributes({RESTORE_METADATA_KEY: until})
    started = time.monotonic()
    assert not await_restore(Metadata(server.host), wait_s=30)
    assert 1.0 <= time.monotonic() - started < 15.0
