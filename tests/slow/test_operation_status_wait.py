"""An operation status Compute Engine may add later, on an operation that never
ends: the wait runs out its (one-second) deadline (the instant ones are in
``tests/unit/test_vm_states.py``)."""

from __future__ import annotations

import logging

import pytest

from spotline.infra.localcloud.cloud import LocalCloud
from spotline.shared.adapters import gce_compute
from spotline.shared.domain.errors import TransientError
from tests.local_cloud import client
from tests.unit.test_gce_compute import vm_request


def test_an_unknown_operation_status_is_not_done_and_logged(
    cloud: LocalCloud, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operation status Compute Engine adds later: the wait goes on (the
    call ends as any unfinished one, transient), never a crash."""
    # Logged once a process: whichever test met such a status first took it.
    monkeypatch.setattr(gce_compute, "_UNKNOWN_OPERATION_STATUS_LOGGED", [])
    cloud.operations.unfinished_status = "QUEUED_FOR_LATER"
    cloud.operation_polls = 10**9
    compute = client(cloud, operation_timeout_s=1.0)

    with caplog.at_level(logging.WARNING), pytest.raises(TransientError, match="not done"):
        compute.insert(vm_request(name="later"))

    assert any("operation status spotline does not know" in r.getMessage() for r in caplog.records)
