"""The agent's restore gate when its metadata cannot be read
(``vm_image/agent/restore_gate``): only an item the metadata server says is
absent means a VM made with no gate. A read that failed (the server did not
answer) says nothing, and a replacement node that took it for an open gate
restored before node 0's save was complete."""

from __future__ import annotations

import time

from spotline.infra.localcloud.metadata_server import Identity, MetadataServer
from spotline.shared.domain.vms import RESTORE_GO, RESTORE_METADATA_KEY
from spotline.vm_image.agent.metadata import Metadata
from spotline.vm_image.agent.restore_gate import await_restore

IDENTITY = Identity("sl-j1-a1-n1-g1", "1234", "us-central1-a", "g2-standard-4", "p", "42")


def test_a_gate_that_cannot_be_read_is_shut_until_the_bound() -> None:
    server = MetadataServer(IDENTITY, {RESTORE_METADATA_KEY: "wait"})
    server.start()
    host = server.host
    server.close()  # nothing answers there now
    started = time.monotonic()
    assert not await_restore(Metadata(host, timeout_s=1.0), wait_s=2.0)
    assert time.monotonic() - started >= 2.0


def test_an_absent_gate_is_none_and_a_readable_one_is_waited_for() -> None:
    server = MetadataServer(IDENTITY, {})
    server.start()
    try:
        assert await_restore(Metadata(server.host), wait_s=30.0)
        server.set_attributes({RESTORE_METADATA_KEY: RESTORE_GO})
        assert await_restore(Metadata(server.host), wait_s=30.0)
    finally:
        server.close()
